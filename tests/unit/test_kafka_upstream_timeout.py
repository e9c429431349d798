"""Forwarded requests have a deadline (``kafka.upstream.request.timeout.ms``, upstream/broker.py):
in front of a broker that accepts connections and never answers, a forwarded request's upstream
connection is closed, and the client connection that owns it, once the timeout plus the
request's own wait (Fetch's ``max_wait_ms``, Produce's ``timeout_ms``) has passed — as Kafka's
NetworkClient drops a connection whose request timed out — so that the client reconnects and
retries. Measured as REQUEST_TIMED_OUT. A real loop, real sockets; the listener runs without a
coordinator (only forwarded requests are sent)."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.server.kafka import wire
from coordinator.server.kafka.listener import KafkaListener
from coordinator.server.kafka.upstream.broker import Upstream, UpstreamError

VERSIONS = {0: (3, 9), 1: (4, 13), 2: (1, 10), 3: (1, 12), 19: (2, 7)}
"""What the silent broker would offer (Produce, Fetch, ListOffsets, Metadata, CreateTopics)."""


class SilentBroker:
    """Accepts connections, reads what it is sent, never answers; says when a connection of
    its own was closed by the other side."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.closed: list[float] = []  # when each connection saw EOF (monotonic)
        self.server: asyncio.Server | None = None
        self.handlers: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers[task] = writer
        while chunk := await reader.read(65536):
            self.received.append(chunk)
        self.closed.append(time.monotonic())
        writer.close()

    async def stop(self) -> None:
        """Close what the listener left open, and wait for every handler to end."""
        assert self.server is not None
        self.server.close()
        for writer in self.handlers.values():
            writer.close()
        await asyncio.wait_for(asyncio.gather(*self.handlers), 5)


async def start(
    timeout_ms: int,
) -> tuple[SilentBroker, KafkaListener, int, list[tuple[int, bool, bool]]]:
    broker = SilentBroker()
    port = await broker.start()
    upstream = Upstream(f"127.0.0.1:{port}", request_timeout_ms=timeout_ms)
    upstream.versions = dict(VERSIONS)
    service: Any = SimpleNamespace(
        authorizer=SimpleNamespace(open=True, ready=True),
        # What the listener's element budget reads (KafkaApis.element_budget): no topics.
        limits=SimpleNamespace(max_groups=10_000, max_partitions=10_000),
        runtime=SimpleNamespace(
            registry=SimpleNamespace(image=lambda: SimpleNamespace(by_name={}))
        ),
    )
    listener = KafkaListener(service, upstream=upstream)
    observed: list[tuple[int, bool, bool]] = []
    listener.on_forward = lambda key: lambda answered, late: observed.append((key, answered, late))
    listen_port = await listener.listen("127.0.0.1", 0)
    return broker, listener, listen_port, observed


def request(key: int, version: int, **values: Any) -> bytes:
    frame = wire.request_frame(wire.build(wire.request_class(key, version), values), 7, "t")
    return struct.pack(">i", len(frame)) + frame


async def closed_after(reader: asyncio.StreamReader, limit_s: float) -> float:
    """Seconds until the listener closed the client's connection (it sends nothing first)."""
    started = time.monotonic()
    data = await asyncio.wait_for(reader.read(1), limit_s)
    assert data == b"", data
    return time.monotonic() - started


async def test_a_request_the_upstream_never_answers_closes_both_connections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: the client's connection and its upstream connection stayed open for ever (a
    Metadata request waited with no end: this test timed out waiting for the close)."""
    broker, listener, port, observed = await start(timeout_ms=300)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        witness_reader, witness_writer = await asyncio.open_connection("127.0.0.1", port)
        with caplog.at_level(logging.WARNING, "kip848.kafka"):
            writer.write(request(3, 1, topics=None))
            elapsed = await closed_after(reader, 5.0)
        assert 0.3 <= elapsed < 2.0
        assert observed == [(3, False, True)]  # counted as REQUEST_TIMED_OUT
        for _ in range(100):  # its upstream connection was closed too
            if broker.closed:
                break
            await asyncio.sleep(0.02)
        assert len(broker.closed) == 1 and broker.received  # the request did reach it
        (record,) = [r for r in caplog.records if "kafka.upstream.request.timeout.ms" in r.message]
        assert record.levelno == logging.WARNING
        assert "metadata v1 forwarded to the upstream broker at 127.0.0.1:" in record.message
        assert "(300 ms)" in record.message
        # Another connection, with nothing forwarded, is not touched.
        assert not witness_reader.at_eof() and len(listener.connections) == 1
        witness_writer.close()
        writer.close()
    finally:
        await listener.close()
        await broker.stop()


async def test_a_request_has_its_own_wait_on_top_of_the_timeout() -> None:
    """A Fetch may wait ``max_wait_ms`` at the broker, a Produce, a CreateTopics and a
    ListOffsets (v10+) ``timeout_ms``: none is cut short before that wait plus the request
    timeout."""
    cases = [
        (1, 4, {"replica_id": -1, "max_wait": 900, "min_bytes": 1, "max_bytes": 1024}),
        (1, 13, {"replica_id": -1, "max_wait": 900, "min_bytes": 1, "max_bytes": 1024}),
        (0, 9, {"acks": -1, "timeout": 900, "topic_data": []}),
        (19, 5, {"topics": [], "timeout": 900, "validate_only": False}),
        (2, 10, {"replica_id": -1, "topics": [], "timeout": 900}),
    ]
    for key, version, values in cases:
        broker, listener, port, observed = await start(timeout_ms=200)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request(key, version, **values))
            elapsed = await closed_after(reader, 5.0)
            assert 1.1 <= elapsed < 3.0, (key, version, elapsed)
            assert observed == [(key, False, True)]
            writer.close()
        finally:
            await listener.close()
            await broker.stop()


async def test_a_produce_without_an_answer_has_no_deadline() -> None:
    """A Produce with acks=0 gets no answer from a broker: nothing is waited for, the
    connection stays."""
    broker, listener, port, observed = await start(timeout_ms=100)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(0, 9, acks=0, timeout=0, topic_data=[]))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.5)
        assert len(listener.connections) == 1 and not broker.closed
        assert observed == [(0, True, False)]
        writer.close()
    finally:
        await listener.close()
        await broker.stop()


def test_serve_refuses_a_bad_request_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--data-dir", str(tmp_path), "--kafka-listen", "127.0.0.1:0"]
    assert main([*argv, "--set", "kafka.upstream.request.timeout.ms=0"]) == 2
    assert "kafka.upstream.request.timeout.ms must be >= 1" in capsys.readouterr().err
    assert main([*argv, "--set", "kafka.upstream.request.timeout.ms=2147483648"]) == 2
    err = capsys.readouterr().err
    assert "invalid value 2147483648 for 'kafka.upstream.request.timeout.ms'" in err
    assert "Kafka type INT" in err


async def test_the_coordinators_own_requests_wait_as_long_plus_their_own_wait() -> None:
    """The coordinator's own connection (start-up, the topic feed, gRPC topic administration)
    waits ``kafka.upstream.request.timeout.ms`` too, plus what the request asks the broker to
    wait: a CreateTopics of ``timeout_ms`` 900 is not given up after the 200 ms of a Metadata."""
    broker = SilentBroker()
    port = await broker.start()
    client = Upstream(f"127.0.0.1:{port}", request_timeout_ms=200).client
    try:
        for entity, least, most in (
            (wire.build(wire.request_class(3, 1), topics=None), 0.2, 1.0),
            (wire.build(wire.request_class(19, 5), topics=[], timeout=900), 1.1, 2.5),
        ):
            started = time.monotonic()
            with pytest.raises(UpstreamError, match="to the upstream broker at 127.0.0.1:"):
                await client.call(entity)
            assert least <= time.monotonic() - started < most
    finally:
        client.close()
        await broker.stop()


async def test_a_request_split_with_the_upstream_is_measured_as_timed_out_too() -> None:
    """A DescribeConfigs of the broker's resources alone goes to the upstream through the
    listener's own await (served.py, not the connection's answer order): past its deadline
    it is measured REQUEST_TIMED_OUT, as the other forwarded requests (before: ABORTED, and
    the request's task waited until the connection's end cancelled it), and both connections
    close without an error logged."""
    broker, listener, port, observed = await start(timeout_ms=300)
    listener.upstream.versions[32] = (1, 4)  # type: ignore[union-attr]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        broker_config = {"resource_type": 4, "resource_name": "1", "configuration_keys": None}
        writer.write(request(32, 4, resources=[broker_config], include_synonyms=False))
        elapsed = await closed_after(reader, 5.0)
        assert 0.3 <= elapsed < 2.0
        assert observed == [(32, False, True)]
        writer.close()
    finally:
        await listener.close()
        await broker.stop()
