"""Trace sampling: which sampler ``kip848 serve`` installs (``--otlp-sample-ratio``, else
``OTEL_TRACES_SAMPLER``, else 1%, parent-based), that a caller's sampled ``traceparent`` is
followed whatever the ratio, that the ratio is applied once, and that a request left out makes
no span and no OpenTelemetry call. Requests go through the coordinator process's instrumented
method table, as a forwarded call does."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assignors.uniform import UniformAssignor
from coordinator.core.config import parse_config
from coordinator.core.errors import ErrorCode
from coordinator.observability import tracing
from coordinator.observability.metrics import CoordinatorMetrics
from coordinator.observability.observer import RuntimeObserver, make_observer
from coordinator.observability.requests import RequestObserver
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.api import Caller, Reply
from coordinator.server.catalog import observe_rpcs, rpc_infos
from coordinator.server.forwarding import ForwardedContext
from coordinator.server.grpc_server import method_table
from coordinator.server.service import CoordinatorService
from coordinator.server.services import ConsumerGroupService, service_descriptors
from kip848.v1 import consumer_group_pb2 as cg

DESCRIBE = "/kip848.v1.ConsumerGroupService/ConsumerGroupDescribe"
WATCH = "/kip848.v1.ConsumerGroupService/ConsumerGroupWatch"
SPAN = "kip848.v1.ConsumerGroupService/ConsumerGroupDescribe"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-01"
NOT_SAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-00"


@pytest.fixture(autouse=True)
def no_sampler_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    yield
    tracing.shutdown()


def traced(exporter: InMemorySpanExporter, ratio: float | None, limit: float | None = 0) -> None:
    """Tracing on at ``ratio``, at most ``limit`` root traces a second (0: no limit; None:
    the default limit)."""
    assert (
        tracing.configure(exporter=exporter, sample_ratio=ratio, max_traces_per_second=limit)
        is True
    )


class Table:
    """The consumer-group servicer behind the instrumented method table (metrics on)."""

    def __init__(self, runtime: CoordinatorRuntime, metrics: CoordinatorMetrics) -> None:
        service = CoordinatorService(runtime)
        observe_rpcs(service, RequestObserver(metrics))
        descriptor = next(d for d in service_descriptors() if d.name == "ConsumerGroupService")
        self.table = method_table([(descriptor, ConsumerGroupService(service))])

    async def describe(self, *metadata: tuple[str, str]) -> Any:
        context = ForwardedContext((("client-id", "app"), *metadata), "ipv4:127.0.0.1:40000")
        response = await self.table[DESCRIBE][1](
            cg.ConsumerGroupDescribeRequest(group_ids=["g"]), context
        )
        assert [g.error_code for g in response.groups] == [ErrorCode.GROUP_ID_NOT_FOUND]
        return response


@pytest.fixture
async def table() -> AsyncIterator[Table]:
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = CoordinatorRuntime(
        config=parse_config({"group.coordinator.shards": "2"}),
        store=MemoryRecordStore(partitions=2),
        clock=ManualClock(1_000_000),
        assignors=[UniformAssignor()],
        observer=RuntimeObserver(metrics),
    )
    await rt.start()
    try:
        yield Table(rt, metrics)
    finally:
        await rt.close()


# ---------------------------------------------------------------- which sampler


def test_the_flag_wins_then_the_environment_then_one_percent() -> None:
    assert tracing.DEFAULT_SAMPLE_RATIO == 0.01
    assert tracing.sampling(None, {}) == (0.01, "parent-based, ratio 0.01 (default)")
    env = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    assert tracing.sampling(0.5, env) == (0.5, "parent-based, ratio 0.5 (--otlp-sample-ratio)")
    assert tracing.sampling(None, env)[0] == 0.25
    assert tracing.sampling(None, {"OTEL_TRACES_SAMPLER": "ParentBased_Always_Off"})[0] == 0.0
    assert tracing.sampling(None, {"OTEL_TRACES_SAMPLER": "parentbased_always_on"})[0] == 1.0
    # Not parent-based, or an argument the SDK would have to interpret: the SDK's sampler.
    assert tracing.sampling(None, {"OTEL_TRACES_SAMPLER": "always_on"}) == (
        None,
        "OTEL_TRACES_SAMPLER=always_on (the SDK's sampler)",
    )
    bad = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "x"}
    assert tracing.sampling(None, bad)[0] is None


def test_serve_samples_one_percent_parent_based_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``make_observer`` is what ``kip848 serve --otlp-endpoint`` runs (the OTLP channel
    connects lazily: nothing listens on the endpoint)."""
    make_observer(metrics=False, otlp_endpoint="127.0.0.1:9", sample_ratio=None)
    assert tracing.STATE.enabled and tracing.STATE.ratio == 0.01
    assert tracing.STATE.provider.sampler.get_description().startswith(
        "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,"
        "remoteParentNotSampled:AlwaysOffSampler,"
    )
    tracing.shutdown()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    make_observer(metrics=False, otlp_endpoint="127.0.0.1:9", sample_ratio=None)
    assert tracing.STATE.ratio is None  # the environment's sampler, as the SDK builds it
    assert tracing.STATE.provider.sampler.get_description() == "TraceIdRatioBased{0.5}"
    tracing.shutdown()
    make_observer(metrics=False, otlp_endpoint="127.0.0.1:9", sample_ratio=0.3)
    assert tracing.STATE.ratio == 0.3  # the flag over the environment


# ---------------------------------------------------------------- what is traced


async def test_a_sampled_traceparent_is_followed_at_ratio_zero(table: Table) -> None:
    exporter = InMemorySpanExporter()
    traced(exporter, 0.0)
    await table.describe()
    await table.describe(("traceparent", NOT_SAMPLED))
    assert exporter.get_finished_spans() == ()
    await table.describe(("traceparent", SAMPLED))
    command, rpc = exporter.get_finished_spans()
    assert (command.name, rpc.name) == ("shard.describe_group", SPAN)
    assert format(rpc.context.trace_id, "032x") == TRACE_ID
    assert format(rpc.parent.span_id, "016x") == "b7ad6b7169203331"
    assert rpc.parent.is_remote
    assert command.parent.span_id == rpc.context.span_id


async def test_an_unsampled_traceparent_is_followed_at_ratio_one(table: Table) -> None:
    exporter = InMemorySpanExporter()
    traced(exporter, 1.0)
    await table.describe(("traceparent", NOT_SAMPLED))
    assert exporter.get_finished_spans() == ()
    await table.describe()
    command, rpc = exporter.get_finished_spans()
    assert (command.name, rpc.name) == ("shard.describe_group", SPAN)
    assert rpc.parent is None  # a root


async def test_a_request_left_out_makes_no_opentelemetry_call(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced(InMemorySpanExporter(), 0.0)

    def forbidden(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("an OpenTelemetry call for a request left out")

    monkeypatch.setattr(tracing.STATE.tracer, "start_as_current_span", forbidden)
    monkeypatch.setattr(tracing.STATE.tracer, "start_span", forbidden)
    monkeypatch.setattr(tracing, "extract", forbidden)  # no traceparent: no propagator
    monkeypatch.setattr(tracing, "rpc_span", forbidden)
    for _ in range(3):
        await table.describe()
    assert tracing.ACTIVE.get() is False


async def test_the_ratio_is_applied_once(table: Table) -> None:
    """400 requests at 25%: about 100 traced (the SDK drawing again would give about 25)."""
    exporter = InMemorySpanExporter()
    traced(exporter, 0.25)
    random.seed(848)
    for _ in range(400):
        await table.describe()
    traced_count = len([s for s in exporter.get_finished_spans() if s.name == SPAN])
    assert 60 <= traced_count <= 140, traced_count  # mean 100, standard deviation 8.7


def test_the_trace_budget_is_a_token_bucket_of_one_second() -> None:
    now = [100.0]
    budget = tracing.TraceBudget(3, clock=lambda: now[0])
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    now[0] += 0.5  # 1.5 tokens back
    assert [budget.take() for _ in range(3)] == [True, False, False]
    now[0] += 10.0  # never more than one second's worth
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    slow = tracing.TraceBudget(0.5, clock=lambda: now[0])  # under one a second: bursts of one
    assert [slow.take(), slow.take()] == [True, False]
    now[0] += 2.0
    assert [slow.take(), slow.take()] == [True, False]


async def test_roots_are_limited_per_second_and_a_sampled_caller_is_always_followed(
    table: Table,
) -> None:
    """Every request drawn (ratio 1), at most 3 root traces a second: 3 of 10 requests in the
    same instant; a caller's sampled traceparent is followed past the limit; the next second
    has room for 3 more."""
    exporter = InMemorySpanExporter()
    traced(exporter, 1.0, limit=3)
    now = [0.0]
    tracing.STATE.budget = tracing.TraceBudget(3, clock=lambda: now[0])
    for _ in range(10):
        await table.describe()
    await table.describe(("traceparent", SAMPLED))
    rpcs = [s for s in exporter.get_finished_spans() if s.name == SPAN]
    assert [s.parent is None for s in rpcs] == [True, True, True, False]
    assert rpcs[3].context.trace_id == int(TRACE_ID, 16)
    now[0] += 1.0
    for _ in range(10):
        await table.describe()
    assert len([s for s in exporter.get_finished_spans() if s.name == SPAN]) == 7


def test_serve_limits_root_traces_to_ten_a_second_by_default() -> None:
    assert tracing.configure(exporter=InMemorySpanExporter()) is True
    assert tracing.STATE.ratio == tracing.DEFAULT_SAMPLE_RATIO == 0.01
    assert tracing.STATE.budget is not None and tracing.STATE.budget.rate == 10.0
    tracing.shutdown()
    assert tracing.STATE.budget is None
    assert tracing.configure(exporter=InMemorySpanExporter(), max_traces_per_second=0) is True
    assert tracing.STATE.budget is None  # 0: no limit


async def test_streaming_rpcs_keep_streaming_with_metrics_and_tracing_on(table: Table) -> None:
    """ConsumerGroupWatch (server-streaming) through the instrumented table: still a stream."""
    traced(InMemorySpanExporter(), 1.0)
    method = table.table[WATCH][1]
    events = [
        e.error_code
        async for e in method(
            cg.ConsumerGroupWatchRequest(group_id="", member_id="m"),
            ForwardedContext((), "ipv4:127.0.0.1:40000"),
        )
    ]
    assert events == [ErrorCode.INVALID_GROUP_ID]


# ---------------------------------------------------------------- the root decisions


def test_root_decisions_leave_out_geometric_gaps_drawn_one_per_traced_request() -> None:
    """Each draw u gives the requests left out before the next traced one, the inverse of the
    geometric law: 1 - u = (1 - p) ** (k + 0.5) leaves out exactly k. Gaps cross the blocks
    the decisions are drawn in."""
    p = 0.01
    gaps = [0, 3, 250, 1, 1023, 1500, 0]
    draws = iter([1 - (1 - p) ** (k + 0.5) for k in [*gaps, 2000]])
    decisions = tracing.root_schedule(p, draw=lambda: next(draws), block=1024)
    got = list(itertools.islice(decisions, sum(gaps) + len(gaps)))
    traced_at = [i for i, traced in enumerate(got) if traced]
    assert traced_at == [end - 1 for end in itertools.accumulate(k + 1 for k in gaps)]
    assert next(draws, None) is None  # one draw per traced request (and the gap after it)


def test_root_decisions_are_the_ratio_in_law() -> None:
    """A million decisions at 1% (a seeded generator): 1% traced within three standard
    deviations, and the share of requests traced right after a traced one is the ratio too
    (independent decisions, no schedule the traffic could fall into step with)."""
    decisions = list(
        itertools.islice(tracing.root_schedule(0.01, draw=random.Random(848).random), 1_000_000)
    )
    assert 9_700 <= sum(decisions) <= 10_300  # mean 10,000, standard deviation 99.5
    after_traced = [b for a, b in itertools.pairwise(decisions) if a]
    assert (
        0
        <= sum(after_traced)
        <= 0.01 * len(after_traced) + 3 * (0.01 * len(after_traced)) ** 0.5 + 1
    )
    for ratio, expected in ((0.0, False), (1.0, True), (None, True)):
        assert set(itertools.islice(tracing.root_schedule(ratio), 10_000)) == {expected}


def test_setting_the_ratio_draws_a_new_schedule() -> None:
    tracing.STATE.ratio = 0.0
    assert not any(tracing.STATE.draw() for _ in range(1000))
    tracing.STATE.ratio = 1.0
    assert all(tracing.STATE.draw() for _ in range(1000))
    tracing.STATE.ratio = None
    assert tracing.STATE.draw() is True


def test_at_the_default_exactly_the_drawn_roots_the_limit_admits_are_traced() -> None:
    """10,000 requests a second for three seconds (an injected clock) at 1% and at most 10
    root traces a second: the traced requests are exactly those the schedule drew and a token
    bucket of 10 a second admits, in order — 40 of about 300 drawn, whatever the request rate."""
    exporter = InMemorySpanExporter()
    traced(exporter, None, limit=None)  # the defaults: 1%, 10 a second
    assert tracing.STATE.ratio == 0.01
    now = [0.0]
    tracing.STATE.budget = tracing.TraceBudget(10, clock=lambda: now[0])
    drawn = itertools.tee(tracing.root_schedule(0.01, draw=random.Random(848).random))
    tracing.STATE.draw = drawn[0].__next__
    reference = tracing.TraceBudget(10, clock=lambda: now[0])
    hook = RequestObserver(None).hook(rpc_infos()["consumer_group_describe"])
    assert hook is not None
    caller = Caller(client_id="app", client_host="/127.0.0.1")
    expected = []
    drawn_count = 0
    for i in range(30_000):
        now[0] = i / 10_000
        if next(drawn[1]):
            drawn_count += 1
            if reference.take():
                expected.append(i)
        began = hook.begin(types.SimpleNamespace(group_id=str(i)), caller)
        hook.end(began, None, caller, Reply(value=[]))
    spans = [s for s in exporter.get_finished_spans() if s.name == SPAN]
    assert [int((s.attributes or {})[tracing.GROUP_ID]) for s in spans] == expected
    assert 250 <= drawn_count <= 350  # about 1%
    assert 39 <= len(expected) <= 40  # 10 at once, then 10 a second


async def test_spans_are_recorded_on_the_loop_and_built_later_with_the_ids_they_were_given(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the endpoint's batching exporter a traced request's spans are recorded on the loop
    and built into the SDK's spans later, in bulk (tracing.flush: the builder thread every
    BUILD_INTERVAL_S): nothing reaches the exporter before, then every span does, with the
    ids it was given as it started (the command's parent is the RPC span, the RPC's the
    caller's), its attributes, and the error it ended with."""
    exporter = InMemorySpanExporter()
    traced(exporter, 1.0)
    tracing.STATE.sync = False  # as configure(endpoint) leaves it
    build = tracing.flush
    monkeypatch.setattr(tracing, "flush", lambda: None)  # no builder thread's flush in between
    monkeypatch.setattr(tracing, "_builder", object())  # (and none started)
    await table.describe(("traceparent", SAMPLED))
    assert exporter.get_finished_spans() == ()
    recorded = list(tracing._RECORDED)
    assert [s.name for s in recorded] == ["shard.describe_group", SPAN]
    build()
    command, rpc = exporter.get_finished_spans()
    assert (command.name, rpc.name) == ("shard.describe_group", SPAN)
    assert [(s.context.trace_id, s.context.span_id) for s in (command, rpc)] == [
        (s.trace_id, s.span_id) for s in recorded
    ]
    assert format(rpc.context.trace_id, "032x") == TRACE_ID
    assert format(rpc.parent.span_id, "016x") == "b7ad6b7169203331" and rpc.parent.is_remote
    assert command.parent.span_id == rpc.context.span_id and not command.parent.is_remote
    assert command.context.trace_flags.sampled and rpc.context.trace_flags.sampled
    assert dict(rpc.attributes)[tracing.ERROR_CODE] == "GROUP_ID_NOT_FOUND"
    assert (rpc.start_time, rpc.end_time) == (recorded[1].start, recorded[1].end)

    # A span that ends with an exception: the exception event and the ERROR status, as the
    # SDK's with-block records them; a write's error says str(error).
    failed = tracing.Recorded("shard.heartbeat", "INTERNAL", {}, None)
    failed.finish(ValueError("bad"))
    tracing.record_span("store.append", {}, links=[failed], start=1, end=2, error=OSError("io"))
    build()
    shard, batch = exporter.get_finished_spans()[2:]
    assert shard.status.description == "ValueError: bad"
    assert [e.name for e in shard.events] == ["exception"]
    assert shard.events[0].attributes["exception.type"] == "ValueError"
    assert (batch.status.description, batch.start_time, batch.end_time) == ("io", 1, 2)
    assert [link.context.span_id for link in batch.links] == [shard.context.span_id]

    # The builder thread builds them on its own, every BUILD_INTERVAL_S.
    monkeypatch.setattr(tracing, "flush", build)
    monkeypatch.setattr(tracing, "_builder", None)
    monkeypatch.setattr(tracing, "BUILD_INTERVAL_S", 0.01)
    await table.describe()
    for _ in range(500):
        if len(exporter.get_finished_spans()) == 6:
            break
        await asyncio.sleep(0.01)
    assert [s.name for s in exporter.get_finished_spans()[4:]] == ["shard.describe_group", SPAN]


def test_a_burst_of_spans_wakes_the_builder_every_batch_of_the_exporter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every BUILD_BATCH spans recorded wake the builder before its interval is over, so the
    exporter's batching processor (a queue of 2,048) gets a burst in batches, not a second's
    worth at once; and the build leaves the exporter's thread a millisecond every BUILD_STEP."""
    exporter = InMemorySpanExporter()
    traced(exporter, 1.0)
    tracing.STATE.sync = False
    monkeypatch.setattr(tracing, "_builder", object())  # as if running: woken, not started
    monkeypatch.setattr(tracing, "_WAKE", threading.Event())
    monkeypatch.setattr(tracing, "BUILD_BATCH", 4)
    for n in range(1, 9):
        tracing.Recorded("s", "INTERNAL", {}, None).finish()
        assert tracing._WAKE.is_set() == (n == 4 or n == 8), n
        if n == 4:
            tracing._WAKE.clear()  # the builder woke
    monkeypatch.setattr(tracing, "BUILD_STEP", 3)
    naps: list[float] = []
    clock = types.SimpleNamespace(sleep=naps.append, time_ns=time.time_ns)
    monkeypatch.setattr(tracing, "time", clock)  # this module's naps only
    tracing.flush()
    assert len(exporter.get_finished_spans()) == 8
    assert naps == [0.001, 0.001]  # after the 3rd and the 6th
