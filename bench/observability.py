"""What metrics and tracing cost: steady heartbeats/s with them off, metrics on, metrics and
tracing on at the default sampling (parent-based 1%, at most 10 root traces a second), at 1%
without that limit and at 100%. Target (issue 18): metrics
and tracing at the default sampling cost at most 5% of the server's CPU per heartbeat, end to
end (``kip848 serve`` under bench/loadgen/h2hb); that row is judged and the verdict printed.

Heartbeats run in-process through the coordinator's own gRPC method table — the path every
call takes in the coordinator process (its connections and forwarded calls alike): proto
request -> service layer -> runtime -> core -> proto response, with the instrumentation as
``kip848 serve --metrics-listen ... --otlp-endpoint ...`` installs it (spans go to a batching
processor whose exporter drops them: the SDK's work is counted, no network). gRPC's own
per-call work is left out, so the relative cost shown is an upper bound on what a client sees.
Rounds of the variants are interleaved and the best is reported (the machine is shared).
End to end (the judged rows): see :func:`end_to_end`; the verdict is "met" only when the 95%
confidence interval of the median paired cost is within the target.

    .venv/bin/python bench/observability.py [--members 200] [--rounds 5] [--seconds 2]
        [--e2e-rounds 160] [--e2e-restart-every 10] [--e2e-seconds 1] [--e2e-interval-ms MS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script: the repo root first, bench/ (assignors.py) out
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from assignors.uniform import UniformAssignor
from bench._report import machine, table, write_section
from coordinator.core.config import parse_config
from coordinator.observability import tracing
from coordinator.observability.metrics import CoordinatorMetrics
from coordinator.observability.observer import RuntimeObserver
from coordinator.observability.requests import RequestObserver
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.catalog import observe_rpcs
from coordinator.server.forwarding import ForwardedContext
from coordinator.server.grpc_server import method_table
from coordinator.server.service import CoordinatorService
from coordinator.server.services import AdminService, ConsumerGroupService, service_descriptors
from kip848.v1 import admin_pb2, common_pb2
from kip848.v1 import consumer_group_pb2 as cg

T = TypeVar("T")
HB = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
DEFAULT = (
    f"metrics+tracing {tracing.DEFAULT_SAMPLE_RATIO:.0%}, "
    f"≤ {tracing.DEFAULT_MAX_TRACES_PER_SECOND:g} traces/s (default)"
)
"""The row judged against the target: what ``--metrics-listen`` and ``--otlp-endpoint`` give
without ``--otlp-sample-ratio``."""
RATIO_ONLY = f"metrics+tracing {tracing.DEFAULT_SAMPLE_RATIO:.0%}, no limit"
ALL = "metrics+tracing 100%, no limit"
CONTROL = "off, a second server (control)"
"""End to end only: the same as "off", in another process; its cost is the measurement's own
error (it should be 0)."""
VARIANTS = ("off", "metrics", DEFAULT, RATIO_ONLY, ALL)
SAMPLE: dict[str, tuple[float | None, float | None]] = {
    DEFAULT: (None, None),
    RATIO_ONLY: (None, 0.0),
    ALL: (1.0, 0.0),
}
"""--otlp-sample-ratio and --otlp-max-traces-per-second of the traced variants (None: not
given, the default; 0: no limit)."""
TARGET = 5.0
"""Percent: metrics and tracing at the default sampling cost at most this much (issue 18)."""


class _Drop(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


async def _setup(variant: str, members: int) -> tuple[CoordinatorRuntime, Any, list[Any]]:
    if variant in SAMPLE:  # as tracing.configure() sets it up, with a batching processor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import DEFAULT_ON

        provider = TracerProvider(sampler=DEFAULT_ON)
        provider.add_span_processor(BatchSpanProcessor(_Drop()))
        tracing.STATE.provider = provider
        tracing.STATE.tracer = provider.get_tracer("bench")
        ratio, limit = SAMPLE[variant]
        tracing.STATE.ratio = tracing.sampling(ratio, {})[0]
        tracing.STATE.budget = tracing.trace_budget(limit)
        tracing.STATE.enabled = True
    metrics = CoordinatorMetrics(process_collectors=False) if variant != "off" else None
    observer = RuntimeObserver(metrics) if variant != "off" else None
    rt = CoordinatorRuntime(
        config=parse_config({"group.coordinator.shards": "4"}),
        store=MemoryRecordStore(partitions=4),
        clock=ManualClock(1_000_000),
        assignors=[UniformAssignor()],
        observer=observer,
    )
    await rt.start()
    service = CoordinatorService(rt)
    observe_rpcs(service, RequestObserver(metrics))
    descriptors = {d.name: d for d in service_descriptors()}
    served = [
        (descriptors["ConsumerGroupService"], ConsumerGroupService(service)),
        (descriptors["AdminService"], AdminService(service)),
    ]
    table_ = method_table(served)
    context = ForwardedContext((("client-id", "bench"),), "ipv4:127.0.0.1:1", None)
    await table_["/kip848.v1.AdminService/CreateTopics"][1](
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="t", num_partitions=64)]
        ),
        context,
    )
    hb = table_[HB][1]
    steady = []
    for i in range(members):  # one member per group: every heartbeat is a steady one afterwards
        group = f"g{i}"
        join = await hb(
            cg.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=f"m{i}",
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=common_pb2.TopicNames(names=["t"]),
                topic_partitions=common_pb2.TopicPartitionsList(),
            ),
            context,
        )
        owned = common_pb2.TopicPartitionsList(
            items=[
                common_pb2.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
                for tp in join.assignment.assigned_topic_partitions
            ]
        )
        await hb(
            cg.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=f"m{i}",
                member_epoch=join.member_epoch,
                topic_partitions=owned,
            ),
            context,
        )
        steady.append(
            (
                cg.ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id=f"m{i}", member_epoch=join.member_epoch
                ),
                context,
            )
        )
    await rt.flush()
    return rt, hb, steady


async def _round(variant: str, members: int, seconds: float) -> float:
    rt, hb, steady = await _setup(variant, members)
    try:
        # CPU time of this process, not wall time: other work on a shared machine steals the
        # CPU, not the cost of a heartbeat (the span exporter's thread is counted too).
        done = 0
        start = time.process_time()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for request, context in steady:
                resp = await hb(request, context)
                if resp.error_code:
                    raise RuntimeError(f"heartbeat failed: {resp}")
            done += len(steady)
        return done / (time.process_time() - start)
    finally:
        await rt.close()
        tracing.shutdown()


async def _main(members: int, rounds: int, seconds: float) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            results[variant].append(await _round(variant, members, seconds))
    return results


# ---------------------------------------------------------------- end to end


class _OtlpSink:
    """A local OTLP/gRPC trace receiver that accepts and drops every export (the server's
    exporter does its real work: encoding and sending)."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        class Sink(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self) -> None:
        self.server.stop(None)


def _with_retries(run: Callable[[], T], attempts: int = 3) -> T:
    """bench/service.py's set-up may meet a server still loading on a busy machine
    (CreateTopics answered COORDINATOR_LOAD_IN_PROGRESS): try again, a bounded number of times."""
    for attempt in range(attempts):
        try:
            return run()
        except (AssertionError, IndexError, RuntimeError) as exc:
            if attempt == attempts - 1:
                raise
            print(f"(retrying an end-to-end run: {exc!r})", file=sys.stderr)
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True, kw_only=True)
class EndToEnd:
    """One variant's end-to-end figures over the rounds (medians)."""

    name: str
    per_s: float
    cpu_us: float
    cost: float
    """Percent: the median over rounds of (CPU per heartbeat / that round's "off" - 1)."""
    costs: list[float]


def end_to_end(
    members: int,
    seconds: float,
    rounds: int,
    interval_ms: float | None = None,
    restart_every: int = 10,
) -> list[EndToEnd]:
    """Each variant's heartbeats/s, server CPU per heartbeat and cost with ``kip848 serve``
    (one process each) driven by bench/loadgen/h2hb (bench/service.py's harness).

    Every variant's server runs at the same time, its members set up once; the load goes to
    one server at a time, in slices of ``seconds``: a round gives every variant a slice, "off"
    first, the others in an order that rotates from round to round. Each cost is paired with
    the "off" slice of its own round, taken seconds before, and the median over rounds is
    reported: a machine that drifts, or a disturbed slice, moves it little. Every
    ``restart_every`` rounds all servers are started afresh: two processes of the same code
    differ by a percent or two (memory layout, hash seeds), a bias a fixed set of processes
    would keep for the whole run. :data:`CONTROL` is a second "off" server, paired with the
    first like the others: its row is the measurement's own error.
    ``interval_ms``: each member heartbeats every ``interval_ms`` (a fixed offered rate)
    instead of back to back (the server's saturation rate)."""
    from bench.service import SERVE, SteadyServer, drive, steady_server

    sink = _OtlpSink()
    try:
        otlp = ["--otlp-endpoint", f"127.0.0.1:{sink.port}"]
        metrics = ["--metrics-listen", "127.0.0.1:0"]
        variants = {
            "off": [],
            CONTROL: [],
            "metrics": metrics,
            DEFAULT: [*metrics, *otlp],  # neither sampling flag: the default sampling
            RATIO_ONLY: [*metrics, *otlp, "--otlp-max-traces-per-second", "0"],
            ALL: [*metrics, *otlp, "--otlp-sample-ratio", "1", "--otlp-max-traces-per-second", "0"],
        }
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        others = [name for name in variants if name != "off"]
        for first in range(0, rounds, restart_every):
            with contextlib.ExitStack() as stack:
                servers: dict[str, SteadyServer] = {}
                for name, flags in variants.items():
                    argv = ["--_serve_plain", *SERVE, *flags]
                    servers[name] = _with_retries(
                        lambda a=argv: stack.enter_context(steady_server(a, members))  # type: ignore[misc]
                    )
                for round_ in range(first, min(first + restart_every, rounds)):
                    k = round_ % len(others)
                    for name in ["off", *others[k:], *others[:k]]:
                        r = drive(servers[name], seconds, interval_ms=interval_ms)
                        runs[name].append((float(r["per_s"]), float(r["server_cpu_us"])))
    finally:
        sink.close()
    off = [cpu for _rate, cpu in runs["off"]]
    rows = []
    for name, results in runs.items():
        costs = [(cpu / base - 1) * 100 for (_rate, cpu), base in zip(results, off, strict=True)]
        rows.append(
            EndToEnd(
                name=name,
                per_s=statistics.median(rate for rate, _cpu in results),
                cpu_us=statistics.median(cpu for _rate, cpu in results),
                cost=statistics.median(costs),
                costs=costs,
            )
        )
    return rows


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``values`` (order statistics:
    the number of values below the median is binomial(n, 1/2)); the whole range when there
    are too few values for ``confidence``."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    k, below = 0, 0.0  # the largest k with P(X < k) <= tail, X ~ binomial(n, 1/2)
    while k < n and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def _interval_text(costs: Sequence[float]) -> str:
    low, high = median_interval(costs)
    return f"{low:+.1f}% … {high:+.1f}%"


def judge(costs: Sequence[float]) -> str:
    """The verdict on the judged row's paired costs (percent) against :data:`TARGET`."""
    low, high = median_interval(costs)
    if high <= TARGET:
        return "met"
    if low > TARGET:
        return "NOT met"
    return "inconclusive"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument(
        "--e2e-seconds", type=float, default=1.0, help="per end-to-end slice (0: skip them)"
    )
    ap.add_argument("--e2e-members", type=int, default=64)
    ap.add_argument("--e2e-rounds", type=int, default=160)
    ap.add_argument(
        "--e2e-restart-every",
        type=int,
        default=10,
        help="start every end-to-end server afresh after this many rounds",
    )
    ap.add_argument(
        "--e2e-interval-ms",
        type=float,
        default=None,
        help="each member heartbeats every this many ms (default: back to back, saturating)",
    )
    args = ap.parse_args(argv)
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):  # the default row: defaults
        os.environ.pop(name, None)
    load_start = os.getloadavg()[0]
    results = asyncio.run(_main(args.members, args.rounds, args.seconds))
    base = 1e6 / max(results["off"])
    rows = []
    for variant in VARIANTS:
        best = max(results[variant])  # the best round: the least disturbed by other processes
        rows.append(
            (
                variant,
                f"{best:,.0f}",
                f"{1e6 / best:.1f}",
                "—" if variant == "off" else f"{(1e6 / best / base - 1) * 100:+.1f}%",
                ", ".join(f"{r:,.0f}" for r in results[variant]),
            )
        )
    text = table(
        [
            "variant",
            "heartbeats per CPU-second (best round)",
            "CPU µs per heartbeat",
            "cost vs off (CPU per heartbeat)",
            "rounds",
        ],
        rows,
    )
    print(text)
    e2e_text = ""
    verdict = ""
    if args.e2e_seconds > 0:
        e2e = end_to_end(
            args.e2e_members,
            args.e2e_seconds,
            args.e2e_rounds,
            args.e2e_interval_ms,
            args.e2e_restart_every,
        )
        judged = next(r for r in e2e if r.name == DEFAULT)
        verdict_short = judge(judged.costs)
        e2e_text = table(
            [
                "variant",
                "heartbeats/s",
                "server CPU µs per heartbeat",
                "cost vs off (median of rounds)",
                "95% confidence interval of the median",
                f"target ≤ {TARGET:g}%",
                "cost in each round",
            ],
            [
                (
                    row.name,
                    f"{row.per_s:,.0f}",
                    f"{row.cpu_us:.1f}",
                    "—" if row.name == "off" else f"{row.cost:+.1f}%",
                    "" if row.name == "off" else _interval_text(row.costs),
                    verdict_short if row.name == DEFAULT else "",
                    "" if row.name == "off" else ", ".join(f"{c:+.1f}%" for c in row.costs),
                )
                for row in e2e
            ],
        )
        print(e2e_text)
        # The instrumentation's own CPU, measured in-process (little noise), over a whole
        # heartbeat's server CPU end to end: what the end-to-end cost should be.
        own_us = 1e6 / max(results[DEFAULT]) - base
        estimate = own_us / e2e[0].cpu_us * 100
        verdict = (
            f"Target: metrics and tracing at the default sampling cost at most {TARGET:g}% of "
            "the server's CPU per heartbeat end to end: "
            + f"{verdict_short}: median {judged.cost:+.1f}% over {len(judged.costs)} paired "
            f"rounds, 95% confidence interval of the median {_interval_text(judged.costs)} "
            "(met: the whole interval within the target; NOT met: the whole interval above it; "
            "else inconclusive)"
            + f". In-process estimate: the instrumentation's own CPU per heartbeat ({own_us:.1f} "
            f"µs, best rounds above) over the server's CPU per heartbeat end to end "
            f"({e2e[0].cpu_us:.0f} µs): {estimate:+.1f}%."
        )
        print(verdict)
    if not args.no_write:
        write_section(
            "observability",
            "## Observability: metrics and tracing on vs off\n\n"
            f"`.venv/bin/python bench/observability.py` ({args.members} members in as many "
            f"groups, {args.rounds} interleaved rounds of {args.seconds:g} s; {machine()}). "
            "Steady heartbeats through the coordinator process's gRPC method table (service "
            "layer, runtime, core), per CPU-second of the process; the gRPC server's own "
            "per-call work (about 15 µs of CPU per call here with the default server, 120-150 "
            "µs with grpc.aio) is not in the denominator, so the relative cost a client sees is "
            "smaller: these rows show what the "
            "instrumentation itself costs, they are not the ones judged. Measured on a shared "
            f"machine (load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at "
            "the end, on 2 CPUs): rough.\n\n"
            + text
            + (
                "\n\nEnd to end: one `kip848 serve` (one process, the default gRPC server) per "
                "variant, all of them "
                f"running at once and started afresh every {args.e2e_restart_every} rounds (two "
                "processes of the same code differ by a percent or two), each with "
                f"{args.e2e_members} steady "
                "members driven by bench/loadgen/h2hb "
                + (
                    "back to back (the server's saturation rate)"
                    if args.e2e_interval_ms is None
                    else f"every {args.e2e_interval_ms:g} ms each (a fixed offered rate)"
                )
                + f", one server at a time, in slices of {args.e2e_seconds:g} s; "
                f"{args.e2e_rounds} rounds, each giving every variant a slice (off first, the "
                "others in an order that rotates). The cost is the server's CPU per heartbeat "
                "(its CPU clock, nanoseconds) "
                'against the "off" slice of the same round, the median over rounds, judged by '
                "its 95% confidence interval (throughput on this shared machine varies more "
                "than the cost). The control row is a second server with everything off, paired "
                "with the first like the others: its cost is the measurement's own error. "
                "Tracing exports to a local "
                "OTLP receiver. The default row is `--metrics-listen` and `--otlp-endpoint` "
                "without `--otlp-sample-ratio` or `--otlp-max-traces-per-second`: parent-based "
                "1%, at most 10 root traces a second (a caller's sampled `traceparent` always "
                "followed); the 1% row without that limit shows what the ratio alone costs. "
                "When every request is traced, each costs about twice as much CPU again as "
                "the request (the OpenTelemetry Python SDK: the spans, their build and export): "
                "the 100% row; a trace's spans are recorded on the loop and built in bulk once "
                "a second, so a trace among thousands of untraced requests does not run the "
                "SDK's code cold each time.\n\n" + e2e_text + "\n\n" + verdict
                if e2e_text
                else ""
            )
            + "\n",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
