"""Service benchmark: the coordinator as people run it.

    .venv/bin/python bench/service.py            # full run, writes docs/benchmarks.md
    .venv/bin/python bench/service.py --quick    # fast look (smaller numbers, same shape)

1. Heartbeats/s through gRPC: ``kip848 serve`` (system clock, SQLite store, under cProfile) in
   one process; a client process with ``--members`` concurrent grpc.aio members (8 per group,
   all reconciled first) sends steady-state heartbeats for ``--seconds``. Reports throughput,
   latency percentiles and where the server's time goes (cProfile, top functions).
2. Group commit: an in-process runtime on a SQLite store (``sync="full"``: fsync per batch);
   N concurrent writers each change a group config in a loop; reports durable batches/s,
   commands/s and commands per batch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._loadgen import (
    build,
    create_topics,
    grpc_groups_stable,
    reconcile_until_stable,
    tree_cpu_s,
)
from bench._report import machine, table, write_section

MEMBERS_PER_GROUP_HB = 8


# ---------------------------------------------------------------- 1. heartbeats through gRPC

HEARTBEAT_PATH = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"


def by_name_per_s(runs: list[tuple[str, dict[str, Any], dict[str, Any]]], name: str) -> float:
    """Heartbeats/s of the row called ``name``."""
    return next(r["per_s"] for row, _kw, r in runs if row == name)


def loadgen() -> str:
    """``bench/loadgen/h2hb`` (C, libnghttp2), built if needed."""
    return build("h2hb")


def _serve_profiled(argv: list[str], profile_out: str) -> int:
    """Child process: ``kip848 serve`` under cProfile; stats dumped on SIGTERM."""
    from coordinator.cli import main

    prof = cProfile.Profile()
    prof.enable()
    try:
        return main(argv)
    finally:
        prof.disable()
        prof.dump_stats(profile_out)


async def _echo_server(port: int, children: int) -> None:
    """Baseline: grpc.aio servers whose heartbeat does nothing but answer (gRPC's own cost),
    ``children`` more of them on the same port (``SO_REUSEPORT``), on uvloop like ours."""
    import grpc

    from kip848.v1 import consumer_group_pb2 as cg
    from kip848.v1 import consumer_group_pb2_grpc

    class Echo(consumer_group_pb2_grpc.ConsumerGroupServiceServicer):
        async def ConsumerGroupHeartbeat(self, request, context):
            return cg.ConsumerGroupHeartbeatResponse(
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                heartbeat_interval_ms=5000,
            )

        async def ConsumerGroupDescribe(self, request, context):
            return cg.ConsumerGroupDescribeResponse()

        async def ConsumerGroupWatch(self, request, context):  # not measured: one message
            yield cg.ConsumerGroupWatchResponse()

    server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
    consumer_group_pb2_grpc.add_ConsumerGroupServiceServicer_to_server(Echo(), server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    procs = [
        subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
            [sys.executable, __file__, "--_echo", str(port), "0"],
            stdout=subprocess.DEVNULL,
        )
        for _ in range(children)
    ]
    await asyncio.sleep(1.0 if children else 0)  # let them bind
    print(f"listening on 127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)
    await server.stop(None)


def _steady_requests(address: str, members: int) -> list[bytes]:
    """Join ``members`` members (groups of 8) and reconcile them (bounded); returns each
    member's steady-state heartbeat, encoded."""
    import grpc

    from kip848.v1 import common_pb2, consumer_group_pb2_grpc
    from kip848.v1 import consumer_group_pb2 as cg

    create_topics(address, {"bench": 4 * MEMBERS_PER_GROUP_HB}, timeout_s=120)
    with grpc.insecure_channel(address) as channel:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        groups = max(1, members // MEMBERS_PER_GROUP_HB)
        ids = [(f"g{i % groups}", f"m{i}") for i in range(members)]
        state: dict[str, tuple[int, common_pb2.TopicPartitionsList]] = {}
        for gid, mid in ids:
            r = stub.ConsumerGroupHeartbeat(
                cg.ConsumerGroupHeartbeatRequest(
                    group_id=gid,
                    member_id=mid,
                    member_epoch=0,
                    rebalance_timeout_ms=60_000,
                    subscribed_topic_names=common_pb2.TopicNames(names=["bench"]),
                    topic_partitions=common_pb2.TopicPartitionsList(),
                ),
                timeout=30,
            )
            assert r.error_code == 0, r
            state[mid] = (
                r.member_epoch,
                common_pb2.TopicPartitionsList(items=r.assignment.assigned_topic_partitions),
            )

        def heartbeat_all() -> bool:
            changed = False
            for gid, mid in ids:
                epoch, owned = state[mid]
                r = stub.ConsumerGroupHeartbeat(
                    cg.ConsumerGroupHeartbeatRequest(
                        group_id=gid, member_id=mid, member_epoch=epoch, topic_partitions=owned
                    ),
                    timeout=30,
                )
                assert r.error_code == 0, r
                if r.HasField("assignment"):
                    owned = common_pb2.TopicPartitionsList(
                        items=r.assignment.assigned_topic_partitions
                    )
                    changed = True
                changed |= r.member_epoch != epoch
                state[mid] = (r.member_epoch, owned)
            return changed

        group_ids = [f"g{g}" for g in range(groups)]
        reconcile_until_stable(
            heartbeat_all, lambda: grpc_groups_stable(stub, group_ids), timeout_s=120
        )
    return [
        cg.ConsumerGroupHeartbeatRequest(
            group_id=g, member_id=m, member_epoch=state[m][0]
        ).SerializeToString()
        for g, m in ids
    ]


async def _py_client(address: str, reqfile: str, seconds: float) -> dict[str, Any]:
    """The Python client: one grpc.aio channel, one task per member, steady heartbeats."""
    import grpc

    from kip848.v1 import consumer_group_pb2 as cg
    from kip848.v1 import consumer_group_pb2_grpc

    reqs = [cg.ConsumerGroupHeartbeatRequest.FromString(b) for b in _read_requests(reqfile)]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        latencies: list[float] = []
        stop_at = time.perf_counter() + seconds

        async def member(req: Any) -> int:
            n = 0
            clock = time.perf_counter
            while clock() < stop_at:
                t0 = clock()
                r = await stub.ConsumerGroupHeartbeat(req)
                latencies.append(clock() - t0)
                if r.error_code:
                    raise AssertionError(r)
                n += 1
            return n

        cpu0, started = time.process_time(), time.perf_counter()
        counts = await asyncio.gather(*(member(r) for r in reqs))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
    latencies.sort()
    calls = sum(counts)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3

    return {
        "calls": calls,
        "failures": 0,
        "seconds": elapsed,
        "per_s": calls / elapsed,
        "client_cpu_us": cpu / calls * 1e6,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
    }


def _read_requests(path: str) -> list[bytes]:
    data, out, pos = Path(path).read_bytes(), [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "little")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


@dataclass
class SteadyServer:
    """A running server (``steady_server``) and its members' steady heartbeats."""

    proc: subprocess.Popen[str]
    address: str
    reqfile: str
    """One encoded steady heartbeat per member: [uint32 little-endian length][bytes]."""
    profile_rows: list[tuple[str, ...]] = field(default_factory=list)
    """A ``--_serve`` (cProfile) server's top functions, read once it has stopped."""


@contextlib.contextmanager
def steady_server(server: list[str], members: int, *, echo: bool = False) -> Iterator[SteadyServer]:
    """Start ``server`` (argv after the script: ``{data}`` and ``{profile}`` are replaced by
    paths in a temporary directory) and set up ``members`` steady members (synthetic ones for
    the echo server); the server is stopped (SIGTERM) on leaving."""
    with tempfile.TemporaryDirectory(prefix="kip848-bench-") as tmp:
        profile = os.path.join(tmp, "server.prof")
        argv = [
            a.replace("{data}", os.path.join(tmp, "data")).replace("{profile}", profile)
            for a in server
        ]
        proc = subprocess.Popen(
            [sys.executable, __file__, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            line = proc.stdout.readline().strip()  # type: ignore[union-attr]
            assert line.startswith("listening on "), line
            address = line.removeprefix("listening on ")
            if echo:
                from kip848.v1 import consumer_group_pb2 as cg

                reqs = [
                    cg.ConsumerGroupHeartbeatRequest(
                        group_id=f"g{i % 8}", member_id=f"m{i}", member_epoch=5
                    ).SerializeToString()
                    for i in range(members)
                ]
            else:
                reqs = _steady_requests(address, members)
            reqfile = os.path.join(tmp, "requests.bin")
            Path(reqfile).write_bytes(b"".join(len(r).to_bytes(4, "little") + r for r in reqs))
            running = SteadyServer(proc=proc, address=address, reqfile=reqfile)
            yield running
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        if server[0] == "--_serve":  # its stats, dumped as it stopped
            running.profile_rows = _top_functions(pstats.Stats(profile, stream=io.StringIO()), 15)


def drive(
    server: SteadyServer,
    seconds: float,
    *,
    client: str = "c",
    connections: int = 8,
    interval_ms: float | None = None,
) -> dict[str, Any]:
    """Drive ``server``'s members with ``client`` (``c``: bench/loadgen/h2hb, ``python``:
    grpc.aio) for ``seconds``, each member sending back to back or (``interval_ms``, C client
    only) every ``interval_ms``; the load generator's figures and the server's CPU per call."""
    if client == "c":
        host, _, port = server.address.rpartition(":")
        cmd = [
            loadgen(),
            host,
            port,
            HEARTBEAT_PATH,
            str(seconds),
            str(connections),
            server.reqfile,
            *([] if interval_ms is None else [f"{interval_ms:g}"]),
        ]
    else:
        cmd = [sys.executable, __file__, "--_client", server.address, server.reqfile, str(seconds)]
    cpu0 = tree_cpu_s(server.proc.pid)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120, check=False)
    server_cpu = tree_cpu_s(server.proc.pid) - cpu0
    if done.returncode:
        raise RuntimeError(f"load generator failed: {done.stdout}{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["server_cpu_us"] = server_cpu / result["calls"] * 1e6
    return result


def bench_heartbeats(
    server: list[str],
    members: int,
    seconds: float,
    *,
    client: str = "c",
    connections: int = 8,
    echo: bool = False,
    interval_ms: float | None = None,
) -> dict[str, Any]:
    """One run: start ``server`` (argv after the script), set up ``members`` steady members
    (synthetic ones for the echo server), drive them with ``client`` (``c``: bench/loadgen,
    ``python``: grpc.aio) for ``seconds``; returns rates, latency and CPU per call."""
    with steady_server(server, members, echo=echo) as running:
        result = drive(
            running, seconds, client=client, connections=connections, interval_ms=interval_ms
        )
    result["profile"] = running.profile_rows
    return result


def _top_functions(stats: pstats.Stats, n: int) -> list[tuple[str, ...]]:
    entries = stats.stats  # type: ignore[attr-defined]
    total = max(s[3] for s in entries.values()) or 1.0  # the outermost cumulative time
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in entries.items():
        rows.append((tottime, cumtime, calls, f"{_short(filename)}:{line}({func})"))
    rows.sort(reverse=True)
    return [
        (name, f"{calls:,}", f"{tottime:.2f}", f"{100 * tottime / total:.1f}%", f"{cumtime:.2f}")
        for tottime, cumtime, calls, name in rows[:n]
    ]


def _short(filename: str) -> str:
    """A profiled file's name relative to the repository (ours) or to site-packages."""
    root = str(Path(__file__).resolve().parents[1]) + "/"
    if filename.startswith(root):
        return filename[len(root) :]
    for marker in ("site-packages/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# ---------------------------------------------------------------- 2. group commit


async def _group_commit(writers: int, seconds: float, data_dir: str) -> dict[str, Any]:
    from coordinator.core.config import GroupCoordinatorConfig
    from coordinator.runtime import CoordinatorRuntime
    from coordinator.runtime.store import SqliteRecordStore

    rt = CoordinatorRuntime(
        config=GroupCoordinatorConfig(), store=SqliteRecordStore(data_dir, sync="full")
    )
    await rt.start()
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []

    async def writer(w: int) -> int:
        n = 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await rt.alter_group_configs(
                f"g{w}", {"consumer.heartbeat.interval.ms": str(5000 + n % 2)}
            )
            latencies.append(time.perf_counter() - t0)
            n += 1
        return n

    b0 = rt.stats["batches"]
    t0 = time.perf_counter()
    done = await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - t0
    batches = rt.stats["batches"] - b0
    await rt.close()
    latencies.sort()
    return {
        "writers": writers,
        "commands_per_s": sum(done) / elapsed,
        "batches_per_s": batches / elapsed,
        "commands_per_batch": sum(done) / max(1, batches),
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
    }


def bench_group_commit(writers_list: list[int], seconds: float) -> list[dict[str, Any]]:
    out = []
    for writers in writers_list:
        with tempfile.TemporaryDirectory(prefix="kip848-gc-") as tmp:
            out.append(asyncio.run(_group_commit(writers, seconds, tmp)))
    return out


# ---------------------------------------------------------------- main


SERVE = ["serve", "--listen", "127.0.0.1:0", "--data-dir", "{data}", "--log-level", "warning"]
ONE_AIO = "kip848 serve --grpc-transport grpcio (grpc.aio, one process)"
TWO_AIO = "kip848 serve --grpc-transport grpcio --grpc-processes 2"
ECHO_ONE = "grpc.aio echo server, one process"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_serve":
        return _serve_profiled(sys.argv[3:], sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "--_serve_plain":
        from coordinator.cli import main as cli_main

        return cli_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--_echo":
        from coordinator.server.loop import run

        run(_echo_server(int(sys.argv[2]), int(sys.argv[3])))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_client":
        print(json.dumps(asyncio.run(_py_client(sys.argv[2], sys.argv[3], float(sys.argv[4])))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller numbers, a few seconds per part")
    ap.add_argument("--members", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the headline configuration")
    ap.add_argument("--only-heartbeats", action="store_true", help="skip group commit")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    members = args.members
    load0 = os.getloadavg()[0]

    plain = ["--_serve_plain", *SERVE]
    aio = [*plain, "--grpc-transport", "grpcio"]
    configs: list[tuple[str, list[str], dict[str, Any]]] = [
        *[(f"kip848 serve (run {i + 1})", plain, {}) for i in range(args.repeat)],
        ("kip848 serve, a connection per member", plain, {"connections": members}),
        ("kip848 serve --event-loop asyncio", [*plain, "--event-loop", "asyncio"], {}),
        (ONE_AIO, aio, {}),
        (TWO_AIO, [*aio, "--grpc-processes", "2"], {}),
        (
            "kip848 serve --grpc-transport grpcio --grpc-processes 3",
            [*aio, "--grpc-processes", "3"],
            {},
        ),
        (ECHO_ONE, ["--_echo", "0", "0"], {"echo": True}),
        ("grpc.aio echo server, two processes", ["--_echo", "0", "1"], {"echo": True}),
        ("kip848 serve, Python grpc.aio client", plain, {"client": "python"}),
        ("kip848 serve under cProfile", ["--_serve", "{profile}", *SERVE], {}),
    ]
    runs = []
    for name, argv, kw in configs:
        result = bench_heartbeats(argv, members, seconds, **kw)
        runs.append((name, kw, result))
        print(
            f"{name}: {result['per_s']:,.0f}/s, server {result['server_cpu_us']:.0f} us/call, "
            f"client {result['client_cpu_us']:.0f} us/call",
            flush=True,
        )
    headline = sorted(r["per_s"] for name, _kw, r in runs[: args.repeat])
    median = headline[len(headline) // 2]
    load1 = os.getloadavg()[0]
    versus_aio = median / max(1.0, by_name_per_s(runs, ONE_AIO))
    profile = runs[-1][2]["profile"]
    hb_table = table(
        (
            "server",
            "client",
            "connections",
            "heartbeats",
            "heartbeats/s",
            "p50 ms",
            "p99 ms",
            "server CPU µs/call",
            "client CPU µs/call",
            "target",
        ),
        [
            (
                name,
                "Python grpc.aio" if kw.get("client") == "python" else "bench/loadgen (C)",
                1 if kw.get("client") == "python" else kw.get("connections", 8),
                f"{r['calls']:,}",
                f"{r['per_s']:,.0f}",
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{r['server_cpu_us']:.0f}",
                f"{r['client_cpu_us']:.0f}",
                ">= 5,000/s" if i < args.repeat else "",
            )
            for i, (name, kw, r) in enumerate(runs)
        ],
    )
    prof_table = table(("function", "calls", "own s", "own %", "cumulative s"), profile)
    by_name = {name: r for name, _kw, r in runs}
    one_aio, two_aio, echo1 = by_name[ONE_AIO], by_name[TWO_AIO], by_name[ECHO_ONE]
    headline_runs = [r for _n, _kw, r in runs[: args.repeat]]
    server_cpu = sorted(r["server_cpu_us"] for r in headline_runs)[len(headline_runs) // 2]
    client_cpu = sorted(r["client_cpu_us"] for r in headline_runs)[len(headline_runs) // 2]
    budget_table = table(
        ("part", "µs per call", "how"),
        [
            ("load generator (C)", f"{client_cpu:.0f}", "client CPU, headline runs (median)"),
            (
                "kip848 serve, all of it (the default gRPC server)",
                f"{server_cpu:.0f}",
                "server CPU, headline runs (median)",
            ),
            (
                "grpc.aio + event loop, no coordinator",
                f"{echo1['server_cpu_us']:.0f}",
                "echo server, one process",
            ),
            (
                "the default gRPC server instead of grpc.aio",
                f"{server_cpu - one_aio['server_cpu_us']:+.0f}",
                "headline minus grpc.aio kip848 serve",
            ),
            (
                "forwarding to the coordinator process (averaged over all calls)",
                f"{two_aio['server_cpu_us'] - one_aio['server_cpu_us']:+.0f}",
                "grpc.aio: --grpc-processes 2 minus one process",
            ),
            (
                "ceiling at 2 cores: 2 s / (client + server) per call",
                f"{2e6 / (client_cpu + server_cpu):,.0f}/s",
                "headline",
            ),
        ],
    )
    print(
        hb_table,
        f"\nmedian of the headline runs: {median:,.0f}/s ({versus_aio:.1f}x grpc.aio; load "
        f"average {load0:.1f} -> {load1:.1f})",
        "\n" + budget_table,
        "\nServer profile (top by own time):\n" + prof_table,
        sep="\n",
        flush=True,
    )
    if not args.no_doc:
        cmd = "python bench/service.py" + (" --quick" if args.quick else "")
        cmd += " --only-heartbeats" if args.only_heartbeats else ""
        write_section(
            "service",
            f"""## Service (`{cmd}`)

{machine()}. Server and client are separate processes sharing the 2 cores.

### Steady-state heartbeats through gRPC

`kip848 serve` (system clock, SQLite store, fsync per batch) with {members} members in groups
of {MEMBERS_PER_GROUP_HB}, all joined and reconciled first; then every member sends its
steady-state heartbeat again as soon as the previous one is answered, for {seconds:.0f} s per
row. The load comes from `bench/loadgen/h2hb.c`, a small C HTTP/2 client (libnghttp2) that
spends about 30 µs of CPU per call and checks every response (HTTP 200, grpc-status 0,
`error_code` 0); the Python row drives the same server with a grpc.aio client (one channel)
instead, the client's CPU shown beside it. The echo rows are grpc.aio servers whose handler
only builds the response: grpc.aio's own ceiling on this machine in the same sitting. Rows
without `--grpc-transport` use the default gRPC server (ours, on libnghttp2); the
`--grpc-transport grpcio` rows are grpc.aio, as every row was before it.

**Headline:** median of {args.repeat} runs of `kip848 serve` (defaults, one process):
**{median:,.0f} heartbeats/s** (target ≥ 5,000/s), **{versus_aio:.1f}×** grpc.aio's
(`--grpc-transport grpcio`, one process) in the same sitting (target ≥ 3×). Load average
{load0:.1f} when the heartbeat rows began, {load1:.1f} when they ended (the machine is shared
with other work: rough numbers).

{hb_table}

CPU per call, from the rows above (µs; server CPU is the sum over the server's processes):

{budget_table}

With grpc.aio a call costs the server mostly gRPC's own work (HTTP/2, the call object, the
event loop), which runs one Python thread per process; `--grpc-processes 2` adds a front-end
process on the same port (`SO_REUSEPORT`) that forwards its calls to the coordinator process
over a Unix socket (coordinator/server/forwarding.py), so that work uses the second core. The
default gRPC server (coordinator/server/h2grpc.py) leaves HTTP/2 to libnghttp2 and costs a
fraction of it, so one process serves more than grpc.aio did with front ends. Two earlier
fixes are in every row: uvloop instead of asyncio's loop, and one generic handler instead of
registered methods (grpc.aio's accept loop runs `asyncio.wait` over one future per registered
method for every call: with our thirty-odd methods that was 20% of the coordinator process's
time under cProfile).

Where the coordinator process's time goes (cProfile of `kip848 serve`, one process; "own %" is
of the whole run including start-up and the joins; the first row is the event loop itself,
i.e. uvloop and libnghttp2's C code, which cProfile cannot see into):

{prof_table}
""",
        )
    if args.only_heartbeats:
        return 0

    gc_rows = bench_group_commit([1, 8, 64, 256] if not args.quick else [1, 64], min(seconds, 5.0))
    gc_table = table(
        (
            "concurrent writers",
            "commands/s",
            "durable batches/s",
            "commands/batch",
            "p50 ms",
            "p99 ms",
        ),
        [
            (
                r["writers"],
                f"{r['commands_per_s']:,.0f}",
                f"{r['batches_per_s']:,.0f}",
                f"{r['commands_per_batch']:.1f}",
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
            )
            for r in gc_rows
        ],
    )
    print("\n" + gc_table, flush=True)

    if not args.no_doc:
        write_section(
            "service-store",
            f"""### Durable batches with group commit

(The time to load a store, which this section measured before, is `bench/load.py`'s:
"Loading the store".)

In-process runtime on SQLite with `sync="full"` (an fsync per batch); each writer changes a
group config in a loop (one record per command). While a batch is being written, new commands
accumulate into the next one, so batches grow with concurrency.

{gc_table}
""",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
