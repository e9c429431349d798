"""Offset commit benchmark: durable partition-commits per second with 16 concurrent committers.

    .venv/bin/python bench/offsets.py            # full run (10 s per row), writes docs/benchmarks.md
    .venv/bin/python bench/offsets.py --quick    # 3 s per row, prints only

Every commit is durable before it is answered: SQLite store with ``sync=full`` (an fsync per
batch; group commit batches whatever arrived while the previous batch was being written). Rows
with ``sync=normal`` (``kip848 serve --sync normal``: the WAL is fsynced at checkpoints only, so
a commit survives ``kill -9`` but not a power loss) show what the fsync costs.

1. Through gRPC: ``kip848 serve`` (system clock) in its own process; this process is the
   client (grpc.aio, one channel). 16 committers, each the only member of its own consumer
   group (joined first, so every commit passes member-epoch fencing; a keeper heartbeats every
   5 s), commit 1 or 100 partitions per request of a 100-partition topic, as fast as answers
   come back.
2. In-process: the same 16 committers call ``CoordinatorRuntime.offset_commit`` directly (no
   gRPC, no protobuf), to show what the coordinator itself costs per commit.

The machine is shared: besides wall-clock throughput the table reports CPU time per
partition-commit (server process for the gRPC rows; this process for the in-process rows) and
the load average around each row.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, table, write_section

if TYPE_CHECKING:
    from coordinator.runtime.store.sqlite import Sync

COMMITTERS = 16
PARTITIONS = 100
TARGET = 20_000
TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _pct(latencies: list[float], p: float) -> float:
    latencies.sort()
    return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3


# ---------------------------------------------------------------- 1. through gRPC


class Server:
    def __init__(self, data_dir: str, sync: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                data_dir,
                "--log-level",
                "warning",
                "--sync",
                sync,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.address = line.removeprefix("listening on ")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


async def _grpc_row(
    address: str, server_pid: int, per_request: int, seconds: float, tag: str
) -> dict[str, Any]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from kip848.v1 import (
        admin_pb2,
        admin_pb2_grpc,
        common_pb2,
        consumer_group_pb2_grpc,
        offsets_pb2,
        offsets_pb2_grpc,
    )
    from kip848.v1 import consumer_group_pb2 as cg

    OC = offsets_pb2.OffsetCommitRequest
    async with grpc.aio.insecure_channel(address) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(200):  # until loaded (bounded): health SERVING
            serving = health_pb2.HealthCheckResponse.SERVING
            answer = await health.Check(health_pb2.HealthCheckRequest())  # type: ignore[attr-defined]
            if answer.status == serving:
                break
            await asyncio.sleep(0.05)
        created = await admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreateTopicsRequest.CreatableTopic(
                        name=f"bench-{tag}", num_partitions=PARTITIONS
                    )
                ]
            )
        )
        assert created.topics[0].error_code == 0, created
        epochs = {}
        for c in range(COMMITTERS):
            join = await groups.ConsumerGroupHeartbeat(
                cg.ConsumerGroupHeartbeatRequest(
                    group_id=f"{tag}-{c}",
                    member_id=f"m{c}",
                    member_epoch=0,
                    rebalance_timeout_ms=60_000,
                    subscribed_topic_names=common_pb2.TopicNames(names=[f"bench-{tag}"]),
                    topic_partitions=common_pb2.TopicPartitionsList(),
                )
            )
            assert join.error_code == 0, join
            epochs[c] = join.member_epoch
        latencies: list[float] = []
        counts = [0] * COMMITTERS
        stop_at = time.perf_counter() + seconds

        async def keeper() -> None:
            for _ in range(10_000):
                await asyncio.sleep(5)
                for c in range(COMMITTERS):
                    await groups.ConsumerGroupHeartbeat(
                        cg.ConsumerGroupHeartbeatRequest(
                            group_id=f"{tag}-{c}", member_id=f"m{c}", member_epoch=epochs[c]
                        )
                    )

        async def committer(c: int) -> None:
            clock = time.perf_counter
            for n in range(1, 10_000_000):
                if clock() >= stop_at:
                    break
                first = (n * per_request) % PARTITIONS
                req = OC(
                    group_id=f"{tag}-{c}",
                    generation_id_or_member_epoch=epochs[c],
                    member_id=f"m{c}",
                    topics=[
                        OC.Topic(
                            name=f"bench-{tag}",
                            partitions=[
                                OC.Partition(
                                    partition_index=(first + k) % PARTITIONS, committed_offset=n
                                )
                                for k in range(per_request)
                            ],
                        )
                    ],
                )
                t0 = clock()
                resp = await offsets.OffsetCommit(req)
                latencies.append(clock() - t0)
                if any(p.error_code for t in resp.topics for p in t.partitions):
                    raise AssertionError(resp)
                counts[c] += per_request

        keep = asyncio.ensure_future(keeper())
        load_before = os.getloadavg()[0]
        cpu0, own0, t0 = _proc_cpu_s(server_pid), _self_cpu_s(), time.perf_counter()
        await asyncio.gather(*(committer(c) for c in range(COMMITTERS)))
        elapsed = time.perf_counter() - t0
        cpu = _proc_cpu_s(server_pid) - cpu0
        own = _self_cpu_s() - own0
        keep.cancel()
    total = sum(counts)
    return {
        "path": "gRPC (`kip848 serve`)",
        "per_request": per_request,
        "requests": len(latencies),
        "commits": total,
        "seconds": elapsed,
        "per_s": total / elapsed,
        "p50_ms": _pct(latencies, 0.5),
        "p99_ms": _pct(latencies, 0.99),
        "cpu_us": 1e6 * cpu / total,
        "client_cpu_us": 1e6 * own / total,
        "load": (load_before, os.getloadavg()[0]),
    }


# ---------------------------------------------------------------- 2. in-process runtime


async def _runtime_row(
    data_dir: str, per_request: int, seconds: float, sync: Sync
) -> dict[str, Any]:
    from coordinator.core.commands import ConsumerGroupHeartbeat
    from coordinator.core.config import parse_config
    from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
    from coordinator.core.topics import NewTopic
    from coordinator.runtime import CoordinatorRuntime, SystemClock
    from coordinator.runtime.store import SqliteRecordStore

    rt = CoordinatorRuntime(
        config=parse_config({}), store=SqliteRecordStore(data_dir, sync=sync), clock=SystemClock()
    )
    await rt.start()
    await rt.create_topics([NewTopic(name="bench", num_partitions=PARTITIONS)])
    epochs = {}
    for c in range(COMMITTERS):
        join = await rt.heartbeat(
            ConsumerGroupHeartbeat(
                group_id=f"g{c}",
                member_id=f"m{c}",
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=("bench",),
                topic_partitions={},
            )
        )
        epochs[c] = join.member_epoch
    latencies: list[float] = []
    counts = [0] * COMMITTERS
    stop_at = time.perf_counter() + seconds

    async def committer(c: int) -> None:
        clock = time.perf_counter
        for n in range(1, 10_000_000):
            if clock() >= stop_at:
                break
            first = (n * per_request) % PARTITIONS
            req = OffsetCommit(
                group_id=f"g{c}",
                generation_id_or_member_epoch=epochs[c],
                member_id=f"m{c}",
                topics=(
                    OffsetCommitTopic(
                        name="bench",
                        partitions=tuple(
                            OffsetCommitPartition(
                                partition_index=(first + k) % PARTITIONS, committed_offset=n
                            )
                            for k in range(per_request)
                        ),
                    ),
                ),
            )
            t0 = clock()
            resp = await rt.offset_commit(req)
            latencies.append(clock() - t0)
            if any(p.error_code for t in resp.topics for p in t.partitions):
                raise AssertionError(resp)
            counts[c] += per_request

    load_before = os.getloadavg()[0]
    batches0 = rt.stats["batches"]
    cpu0, t0 = _self_cpu_s(), time.perf_counter()
    await asyncio.gather(*(committer(c) for c in range(COMMITTERS)))
    elapsed = time.perf_counter() - t0
    cpu = _self_cpu_s() - cpu0
    batches = rt.stats["batches"] - batches0
    await rt.close()
    total = sum(counts)
    return {
        "path": "in-process runtime",
        "per_request": per_request,
        "requests": len(latencies),
        "commits": total,
        "seconds": elapsed,
        "per_s": total / elapsed,
        "p50_ms": _pct(latencies, 0.5),
        "p99_ms": _pct(latencies, 0.99),
        "cpu_us": 1e6 * cpu / total,
        "client_cpu_us": None,
        "load": (load_before, os.getloadavg()[0]),
        "requests_per_batch": len(latencies) / max(1, batches),
    }


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 s per row; print only, do not write docs/benchmarks.md",
    )
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kip848-bench-offsets-") as tmp:
        for sync, sizes in (("full", (1, 100)), ("normal", (1,))):
            server = Server(os.path.join(tmp, f"served-{sync}"), sync)
            try:
                for per_request in sizes:
                    row = asyncio.run(
                        _grpc_row(
                            server.address, server.proc.pid, per_request, seconds, f"r{per_request}"
                        )
                    )
                    rows.append({**row, "sync": sync})
                    print(_line(rows[-1]), flush=True)
            finally:
                server.stop()
        in_process: tuple[tuple[Sync, tuple[int, ...]], ...] = (
            ("full", (1, 100)),
            ("normal", (1,)),
        )
        for sync, per_request_sizes in in_process:
            for per_request in per_request_sizes:
                row = asyncio.run(
                    _runtime_row(
                        os.path.join(tmp, f"inproc-{sync}-{per_request}"),
                        per_request,
                        seconds,
                        sync,
                    )
                )
                rows.append({**row, "sync": sync})
                print(_line(rows[-1]), flush=True)
    headers = (
        "path",
        "sync",
        "partitions/request",
        "committers",
        "requests",
        "partition-commits",
        "seconds",
        "partition-commits/s",
        "p50 ms",
        "p99 ms",
        "server CPU µs/commit",
        "client CPU µs/commit",
        "load avg (before→after)",
        "target",
    )
    body_rows = [
        (
            r["path"],
            r["sync"],
            r["per_request"],
            COMMITTERS,
            f"{r['requests']:,}",
            f"{r['commits']:,}",
            f"{r['seconds']:.1f}",
            f"{r['per_s']:,.0f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['cpu_us']:.1f}",
            "" if r["client_cpu_us"] is None else f"{r['client_cpu_us']:.1f}",
            f"{r['load'][0]:.2f}→{r['load'][1]:.2f}",
            f">= {TARGET:,}/s" if r["path"].startswith("gRPC") and r["sync"] == "full" else "",
        )
        for r in rows
    ]
    text = table(headers, body_rows)
    print()
    print(text)
    if args.quick:
        return 0
    inproc = [r for r in rows if r["path"] == "in-process runtime" and r["sync"] == "full"]
    by = {(r["path"].split()[0], r["sync"], r["per_request"]): r for r in rows}
    g1, i1, n1 = (
        by[("gRPC", "full", 1)],
        by[("in-process", "full", 1)],
        by[("in-process", "normal", 1)],
    )
    write_section(
        "offsets",
        "\n".join(
            [
                "## Durable offset commits (`python bench/offsets.py`)",
                "",
                f"{machine()}. `kip848 serve` and the client are separate processes sharing the CPUs; the",
                "machine is shared with other work, so CPU time per commit is the steadier figure.",
                "SQLite store, `sync=full` (fsync per batch). 16 committers, each the only member of its",
                "own consumer group, commit with their member epoch (fencing checked on every request).",
                "",
                text,
                "",
                "In the in-process rows (no gRPC, no protobuf) the CPU column is the whole process: "
                "runtime, core, encoding and the SQLite writer thread; group commit put "
                + ", ".join(f"{r['requests_per_batch']:.1f}" for r in inproc)
                + " requests in each durable batch (1 and 100 partitions per request).",
                "",
                (
                    f"**One partition per request misses the {TARGET:,}/s target** ({g1['per_s']:,.0f}/s through gRPC). "
                    f"Two limits, both visible above: (1) CPU per request. The server spends {g1['cpu_us']:.0f} µs of CPU "
                    f"per single-partition commit, while the coordinator's own path (the in-process row, including its "
                    f"share of the SQLite writer) costs {i1['cpu_us']:.0f} µs; the rest is grpc.aio's per-call machinery "
                    "(the same ceiling as heartbeats, see the service section's profile), so 20,000 RPCs/s would need "
                    "several cores of it. (2) Latency. 16 committers that each wait for a durable answer can never "
                    f"exceed 16 / latency: with an fsync per batch (p50 {i1['p50_ms']:.1f} ms in-process) that is about "
                    f"{i1['per_s']:,.0f}/s however cheap the CPU path; without the per-batch fsync ({n1['per_s']:,.0f}/s, "
                    f"p50 {n1['p50_ms']:.2f} ms) the CPU becomes the limit. Batching partitions per request (clients do: "
                    "one OffsetCommit carries every partition they own) is what reaches the target."
                ),
            ]
        ),
    )
    return 0


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['path']}, sync={r['sync']}: {r['per_request']} partitions/request: {r['per_s']:,.0f} partition-commits/s, "
        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, {r['cpu_us']:.1f} µs CPU/commit, "
        f"load {r['load'][0]:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
