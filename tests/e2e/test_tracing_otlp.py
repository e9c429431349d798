"""A real ``kip848 serve --otlp-endpoint`` exports its spans over OTLP/gRPC to a local receiver
(the OpenTelemetry protocol's own trace service): the sampling the flags and the environment
choose — ``--otlp-sample-ratio``, else ``OTEL_TRACES_SAMPLER``, else parent-based 1% — and a
caller's sampled ``traceparent`` followed whatever the ratio."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import ServerProcess, run_cli
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from kip848.v1 import consumer_group_pb2

TRACE_ID = "5b8efff798038103d269b633813fc60c"
SAMPLED = f"00-{TRACE_ID}-eee19b7ec3c1b174-01"
DESCRIBE = "kip848.v1.ConsumerGroupService/ConsumerGroupDescribe"
COMMAND = "shard.describe_group"
TRACED = [(TRACE_ID, DESCRIBE), (TRACE_ID, COMMAND)]
"""The spans of the traced ConsumerGroupDescribe: its RPC and its group's shard command."""


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span exported to it: (trace id hex, span name)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend((s.trace_id.hex(), s.name) for s in scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    sink = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield sink, port
    finally:
        server.stop(None)


def serve(tmp_path: Path, port: int, *extra: str) -> ServerProcess:
    return ServerProcess(
        tmp_path / "data", "--otlp-endpoint", f"127.0.0.1:{port}", "--log-level", "info", *extra
    )


def describe(server: ServerProcess, *metadata: tuple[str, str]) -> None:
    """One group described: a read run as a command on the group's shard (a child span of the
    RPC's), unlike the cluster log's reads, answered from its committed copy with no command."""
    answer = server.groups.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["traced"]),
        metadata=metadata,
        timeout=5,
    )
    assert answer.error_code == 0


def test_ratio_zero_traces_only_what_the_caller_sampled(
    tmp_path: Path, receiver: tuple[Receiver, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sink, port = receiver
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")  # the flag wins
    server = serve(tmp_path, port, "--otlp-sample-ratio", "0")
    for _ in range(5):
        describe(server)
    describe(server, ("traceparent", SAMPLED))
    assert server.stop() == 0  # flushes the exporter
    log = server.stderr_text()
    assert "sampling parent-based, ratio 0 (--otlp-sample-ratio)" in log, log
    assert sorted(sink.spans) == TRACED


def test_one_percent_by_default_and_the_environment_when_set(
    tmp_path: Path, receiver: tuple[Receiver, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sink, port = receiver
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    server = serve(tmp_path, port)
    describe(server, ("traceparent", SAMPLED))
    assert server.stop() == 0
    log = server.stderr_text()
    assert "sampling parent-based, ratio 0.01 (default)" in log, log
    assert (TRACE_ID, DESCRIBE) in sink.spans
    sink.spans.clear()

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    server = serve(tmp_path, port)
    for _ in range(5):
        describe(server)
    describe(server, ("traceparent", SAMPLED))
    assert server.stop() == 0
    log = server.stderr_text()
    assert "sampling parent-based, ratio 0 (OTEL_TRACES_SAMPLER=parentbased_always_off)" in log
    assert sorted(sink.spans) == TRACED


def test_root_traces_are_limited_per_second_and_callers_always_followed(
    tmp_path: Path, receiver: tuple[Receiver, int]
) -> None:
    """Every request drawn (ratio 1) but at most 0.2 root traces a second (a bucket of one):
    of 8 requests in a moment one is traced; a caller's sampled traceparent still is."""
    sink, port = receiver
    server = serve(
        tmp_path, port, "--otlp-sample-ratio", "1", "--otlp-max-traces-per-second", "0.2"
    )
    for _ in range(8):
        describe(server)
    describe(server, ("traceparent", SAMPLED))
    assert server.stop() == 0
    log = server.stderr_text()
    assert (
        "sampling parent-based, ratio 1 (--otlp-sample-ratio), at most 0.2 root traces a second"
        in log
    ), log
    names = sorted(name for _trace, name in sink.spans)
    assert names == sorted([DESCRIBE, COMMAND] * 2), sink.spans
    assert sorted(s for s in sink.spans if s[0] == TRACE_ID) == TRACED


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "many"])
def test_a_bad_trace_limit_is_a_usage_error(tmp_path: Path, value: str) -> None:
    done = run_cli(
        "serve",
        "--data-dir",
        str(tmp_path / "d"),
        "--otlp-endpoint",
        "127.0.0.1:1",
        "--otlp-max-traces-per-second",
        value,
    )
    assert done.returncode == 2, done
    assert f"expected a number >= 0, got {value!r}" in done.stderr, done.stderr
