"""Requests and commands recorded as plain appends on the loop (``histograms.LoopHistogram``),
bucketed off the loop: the latency, queue-time and processing-time histograms of a known
sequence of calls are exact (counts, sums, buckets, by RPC, protocol, error code and shard), a
command run in a request's context after the request was answered has no queue time, and a
scrape sees every request answered before it began, with counts that never go down while
requests are answered during scrapes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from coordinator.core.errors import ErrorCode
from coordinator.observability import histograms as h
from coordinator.observability import metrics as m
from coordinator.observability import observer as observer_module
from coordinator.observability import requests as requests_module
from coordinator.observability.metrics import CoordinatorMetrics, parse_families
from coordinator.observability.observer import RuntimeObserver
from coordinator.observability.requests import RequestObserver
from coordinator.server.api import Caller, Reply
from coordinator.server.catalog import rpc_infos

HEARTBEAT = "consumer_group_heartbeat"


class Clock:
    """``time.monotonic`` for the hook and the runtime observer: each read is the next value."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(requests_module.time, "monotonic", fake)  # read as the hook is built
    monkeypatch.setattr(observer_module, "monotonic", fake)
    yield fake


class Response:
    """A plain core response (no entries, no code of its own): its Reply's code is the code."""


def answer(code: ErrorCode) -> Reply[Any]:
    return Reply(value=Response(), error_code=code) if code else Reply(value=Response())


GRPC = Caller(client_id="c", client_host="/127.0.0.1")
KAFKA = Caller(client_id="c", client_host="/127.0.0.1", api_version=1)


def histogram(metrics: CoordinatorMetrics, name: str) -> dict[tuple[Any, ...], float]:
    """(sample suffix, labels without le, le) -> value, from one scrape's text."""
    text = generate_latest(metrics.registry).decode()
    out = {}
    for sample in parse_families(text)[name]:
        labels = dict(sample.labels)
        le = labels.pop("le", "")
        out[(sample.name.removeprefix(name), tuple(sorted(labels.items())), le)] = sample.value
    return out


def series(got: dict[tuple[Any, ...], float], **labels: str) -> dict[tuple[str, str], float]:
    key = tuple(sorted(labels.items()))
    return {(suffix, le): v for (suffix, lab, le), v in got.items() if lab == key}


def expected(values: list[float]) -> dict[tuple[str, str], float]:
    """The cumulative buckets, count and sum of ``values`` in LATENCY_BUCKETS."""
    out: dict[tuple[str, str], float] = {}
    for bound in m.LATENCY_BUCKETS:
        out[("_bucket", h._le(bound))] = float(sum(1 for v in values if v <= bound))
    out[("_bucket", "+Inf")] = float(len(values))
    out[("_count", "")] = float(len(values))
    out[("_sum", "")] = sum(values)
    return out


class Calls:
    """The hook of one RPC and the runtime observer of two shards, driven with the clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.metrics = CoordinatorMetrics(process_collectors=False)
        self.runtime = RuntimeObserver(self.metrics)
        self.runtime.attach(2, [])
        hook = RequestObserver(self.metrics).hook(rpc_infos()[HEARTBEAT])
        assert hook is not None
        self.hook = hook

    def call(
        self,
        caller: Caller,
        code: ErrorCode | None,
        *,
        shard: int = 0,
        queued: float,
        processing: float,
        after: float,
    ) -> float:
        """One request: reaches the service layer now, its command starts ``queued`` seconds
        later and runs ``processing`` seconds, its answer (``code``; None: the transport
        ended it) is ready ``after`` seconds after that. Returns its latency."""
        clock = self.clock
        start = clock.now
        began = self.hook.begin(object(), caller)
        clock.now += queued

        def command(_machine: Any) -> str:
            clock.now += processing
            return "done"

        assert self.runtime.run_command(shard, command, None) == "done"
        clock.now += after
        self.hook.end(began, object(), caller, None if code is None else answer(code))
        latency = clock.now - start
        clock.now += 1.0  # the next request comes later
        return latency


def test_every_sample_of_a_known_sequence_of_calls_is_exact(clock: Clock) -> None:
    calls = Calls(clock)
    ok_grpc = [
        calls.call(GRPC, ErrorCode.NONE, queued=0.00002, processing=0.00003, after=0.00001),
        calls.call(GRPC, ErrorCode.NONE, shard=1, queued=0.003, processing=0.0004, after=0.02),
        calls.call(GRPC, ErrorCode.NONE, queued=0.0, processing=0.2, after=3.0),
    ]
    fenced_grpc = [
        calls.call(GRPC, ErrorCode.FENCED_MEMBER_EPOCH, queued=0.0012, processing=0.0, after=0.0)
    ]
    ok_kafka = [
        calls.call(KAFKA, ErrorCode.NONE, shard=1, queued=0.00015, processing=0.00012, after=0.0)
    ]
    aborted = [calls.call(GRPC, None, queued=0.0, processing=0.00001, after=0.0)]
    latency = histogram(calls.metrics, "kip848_request_duration_seconds")
    grpc = {"rpc": "ConsumerGroupHeartbeat", "protocol": "grpc", "route": "served"}
    assert series(latency, **grpc, error="NONE") == pytest.approx(expected(ok_grpc))
    assert series(latency, **grpc, error="FENCED_MEMBER_EPOCH") == pytest.approx(
        expected(fenced_grpc)
    )
    assert series(latency, **grpc, error="ABORTED") == pytest.approx(expected(aborted))
    kafka = {**grpc, "protocol": "kafka"}
    assert series(latency, **kafka, error="NONE") == pytest.approx(expected(ok_kafka))
    assert len({lab for _, lab, _ in latency}) == 4  # nothing else

    queue = histogram(calls.metrics, "kip848_event_queue_time_seconds")
    assert series(queue, shard="0") == pytest.approx(expected([0.00002, 0.0, 0.0012, 0.0]))
    assert series(queue, shard="1") == pytest.approx(expected([0.003, 0.00015]))
    assert series(queue, shard="registry") == expected([])
    processing = histogram(calls.metrics, "kip848_event_processing_time_seconds")
    assert series(processing, shard="0") == pytest.approx(expected([0.00003, 0.2, 0.0, 0.00001]))
    assert series(processing, shard="1") == pytest.approx(expected([0.0004, 0.00012]))

    # What comes after a scrape is in the next one, added to what it saw.
    ok_grpc.append(calls.call(GRPC, ErrorCode.NONE, queued=0.0, processing=0.6, after=0.0))
    latency = histogram(calls.metrics, "kip848_request_duration_seconds")
    assert series(latency, **grpc, error="NONE") == pytest.approx(expected(ok_grpc))
    processing = histogram(calls.metrics, "kip848_event_processing_time_seconds")
    assert series(processing, shard="0") == pytest.approx(
        expected([0.00003, 0.2, 0.0, 0.00001, 0.6])
    )


def test_a_command_without_a_request_has_no_queue_time_and_a_late_one_counts_zero(
    clock: Clock,
) -> None:
    calls = Calls(clock)
    calls.runtime.run_command(0, lambda _machine: clock.__setattr__("now", clock.now + 0.01), None)
    processing = histogram(calls.metrics, "kip848_event_processing_time_seconds")
    assert series(processing, shard="0") == pytest.approx(expected([0.01]))
    queue = histogram(calls.metrics, "kip848_event_queue_time_seconds")
    assert series(queue, shard="0") == expected([])
    # A forwarded call received "after" its command started (clocks of two processes): 0.
    began = calls.hook.begin(object(), Caller(received=clock.now + 5.0))
    calls.runtime.run_command(0, lambda _machine: None, None)
    calls.hook.end(began, object(), GRPC, answer(ErrorCode.NONE))
    queue = histogram(calls.metrics, "kip848_event_queue_time_seconds")
    assert series(queue, shard="0") == expected([0.0])


def test_a_scrape_sees_every_request_answered_before_it_began(clock: Clock) -> None:
    """Requests answered while another thread scrapes: every scrape's count is at least the
    requests answered before it began and at most those answered before it ended, counts
    never go down, and the last scrape has them all, each in its bucket."""
    calls = Calls(clock)
    total = 20_000
    answered = [0]
    seen: list[tuple[int, float, int]] = []  # (answered before, count, answered after)
    done = threading.Event()
    name = "kip848_request_duration_seconds"
    labels = (("error", "NONE"), ("protocol", "grpc"), ("route", "served"))
    labels += (("rpc", "ConsumerGroupHeartbeat"),)

    def scrape() -> None:
        while not done.is_set():
            before = answered[0]
            count = histogram(calls.metrics, name).get(("_count", labels, ""), 0.0)
            seen.append((before, count, answered[0]))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for i in range(total):
            calls.call(
                GRPC,
                ErrorCode.NONE,
                queued=0.0,
                processing=0.0,
                after=0.002 if i % 2 else 0.00005,
            )
            answered[0] += 1
    finally:
        done.set()
        scraper.join(timeout=60)
    assert not scraper.is_alive()
    assert len(seen) > 1
    # (the request being answered as a scrape reads may be in it: recorded before it returns)
    assert all(before <= count <= after + 1 for before, count, after in seen)
    counts = [count for _, count, _ in seen]
    assert counts == sorted(counts)
    final = histogram(calls.metrics, name)
    assert final[("_count", labels, "")] == total
    assert final[("_bucket", labels, "0.0001")] == total / 2
    assert final[("_bucket", labels, "0.0025")] == total
    assert final[("_sum", labels, "")] == pytest.approx(total / 2 * 0.00205, rel=1e-9)


def test_the_folder_thread_buckets_the_samples_without_a_scrape(clock: Clock) -> None:
    calls = Calls(clock)
    for _ in range(100):
        calls.call(GRPC, ErrorCode.NONE, queued=0.0, processing=0.001, after=0.0)
    child = calls.metrics.event_processing_time.labels("0")
    assert len(child.pending) == 100
    with h._FOLD_LOCK:  # as the folder thread does, every FOLD_INTERVAL_S
        for live in list(h._LIVE):
            live.fold()
    assert len(child.pending) == 0 and sum(child.counts) == 100
    latency = calls.metrics.request_series("ConsumerGroupHeartbeat", "grpc").child(0)
    assert len(latency.pending) == 0 and sum(latency.counts) == 100


def test_a_value_that_is_not_a_number_is_refused_where_it_is_observed(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Pending values are doubles (an array): a value that is not a number never gets in (a
    TypeError where it is observed: every value the coordinator observes is a difference of
    clock readings), so nothing pending can stop a fold; the folder and the observations after
    it go on."""
    calls = Calls(clock)
    series_ = calls.metrics.request_series("ConsumerGroupHeartbeat", "grpc")
    with pytest.raises(TypeError):
        series_.ok("not a number")  # type: ignore[arg-type]
    assert len(series_.child(0).pending) == 0
    with h._FOLD_LOCK:
        for live in list(h._LIVE):
            live.fold()
    assert "Folding" not in caplog.text
    calls.call(GRPC, ErrorCode.NONE, queued=0.0, processing=0.0, after=0.001)  # and it goes on
    latency = histogram(calls.metrics, "kip848_request_duration_seconds")
    assert sum(v for (suffix, _, _), v in latency.items() if suffix == "_count") == 1


def test_a_command_run_in_an_answered_request_s_context_has_no_queue_time(clock: Clock) -> None:
    """The request's context may outlive it (a Kafka connection serves its queued requests one
    after the other in one task): a command run there once the request was answered is no
    request's, as a timer's is not."""
    calls = Calls(clock)
    began = calls.hook.begin(object(), GRPC)
    calls.hook.end(began, object(), GRPC, answer(ErrorCode.NONE))
    calls.runtime.run_command(0, lambda _machine: None, None)
    assert series(histogram(calls.metrics, "kip848_event_queue_time_seconds"), shard="0") == (
        expected([])
    )
    assert calls.metrics.event_processing_time.labels("0").counts[0] == 1


class CountingClock(Clock):
    """The fixture's clock, counting its reads."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.clock.now


def test_the_runtime_s_turn_clock_reads_time_the_whole_command_for_the_observer(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command the driver runs at once is timed once, by its turn accounting (two clock
    reads, not four), and its processing time covers the driver's handling of the result
    (here: starting the pending batch, 2 ms on this clock) as Kafka's event-processing-time-ms
    covers the whole event: the same seconds charged to its turn and observed; its queue time
    runs from the request's arrival to that start. A command the driver runs outside a turn
    (a timer's) is timed by the driver too; a read of committed state by the observer."""
    from builders import join

    from coordinator.core.commands import Result
    from coordinator.harness import Harness
    from coordinator.runtime import requests
    from coordinator.runtime.driver import Driver, RuntimeState

    metrics = CoordinatorMetrics(process_collectors=False)
    observer = RuntimeObserver(metrics)
    observer.attach(1, [])
    harness = Harness()
    world = harness.world
    perf = CountingClock(clock)  # the engine's turn clock, the arrivals' (as on Linux)
    monkeypatch.setattr(observer_module, "same_clock", lambda read: read is perf, raising=False)
    world.perf = perf  # type: ignore[method-assign]

    def write() -> None:  # the driver starts a pending batch: the writer is woken
        clock.now += 0.002

    world.write = write  # type: ignore[method-assign]
    driver = Driver(
        machines=[harness.shard, harness.registry],
        config=harness.config,
        clock=harness.clock,
        host=world,
        observer=observer,
    )
    world.driver = driver
    driver.state = RuntimeState.ACTIVE

    began = RequestObserver(metrics).hook(rpc_infos()[HEARTBEAT])
    assert began is not None
    request = began.begin(object(), GRPC)  # arrives at 1000.0
    clock.now += 0.0005  # its command starts 0.5 ms later
    response, fut = driver.request(requests.heartbeat(join(), harness.clock.now_ms()))
    assert response is None and fut is not None  # its records wait for their batch
    assert perf.reads == 2  # one pair, shared by the turn and the observer
    assert driver.turns._spent == {0: pytest.approx(0.002)}
    processing = histogram(metrics, "kip848_event_processing_time_seconds")
    assert series(processing, shard="0") == pytest.approx(expected([0.002]))
    queue = histogram(metrics, "kip848_event_queue_time_seconds")
    assert series(queue, shard="0") == pytest.approx(expected([0.0005]))
    began.end(request, object(), GRPC, None)

    # Outside the turns (no request's context now: no queue time): timed by the driver.
    def command(_shard: Any) -> Result[None]:
        clock.now += 0.003
        return Result()

    driver.execute(0, command)
    assert perf.reads == 4
    processing = histogram(metrics, "kip848_event_processing_time_seconds")
    assert series(processing, shard="0") == pytest.approx(expected([0.002, 0.003]))
    queue = histogram(metrics, "kip848_event_queue_time_seconds")
    assert series(queue, shard="0") == pytest.approx(expected([0.0005]))
