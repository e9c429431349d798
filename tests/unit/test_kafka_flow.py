"""The Kafka listener's flow control (listener.py, ``KafkaFlow``) on a real loop and real
sockets: a connection works at most one turn per loop iteration, stops reading while its client
does not take its answers, and every answer is there, in order, once the client reads. The
listener runs without a coordinator: ApiVersions is answered by the listener itself."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.server.kafka import wire
from coordinator.server.kafka.listener import (
    FRAMES_PER_TURN,
    KafkaConnection,
    KafkaFlow,
    KafkaListener,
    KafkaOptions,
)
from coordinator.server.kafka.served import KafkaApis


def api_versions(count: int) -> bytes:
    """``count`` ApiVersions v3 requests, correlation ids 0..count-1."""
    entity = wire.build(
        wire.request_class(18, 3), client_software_name="flow", client_software_version="1"
    )
    payload = wire.request_frame(entity, 0, "flow")
    head, tail = payload[:4], payload[8:]
    return b"".join(
        struct.pack(">i", len(payload)) + head + struct.pack(">i", i) + tail for i in range(count)
    )


async def read_answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        frame = await reader.readexactly(size)
        ids.append(struct.unpack_from(">i", frame)[0])
    return ids


async def start(flow: KafkaFlow | None = None) -> tuple[KafkaListener, int]:
    listener = KafkaListener(service=None, options=KafkaOptions(flow=flow or KafkaFlow()))  # type: ignore[arg-type]
    port = await listener.listen("127.0.0.1", 0)
    return listener, port


async def test_a_pipelining_connection_reads_one_turn_per_loop_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5,000 pipelined requests arrive in a few big reads; the listener handles at most
    ``FRAMES_PER_TURN`` of them per loop iteration, so every other callback (another
    connection, the runtime) runs in between."""
    loop = asyncio.get_running_loop()
    iteration = 0
    running = True

    def tick() -> None:
        nonlocal iteration
        iteration += 1
        if running:
            loop.call_soon(tick)

    per_iteration: Counter[int] = Counter()
    on_frame = KafkaConnection.on_frame

    def counted(self: KafkaConnection, frame: bytes) -> None:
        per_iteration[iteration] += 1
        on_frame(self, frame)

    monkeypatch.setattr(KafkaConnection, "on_frame", counted)
    listener, port = await start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    tick()
    writer.write(api_versions(5000))
    assert await asyncio.wait_for(read_answers(reader, 5000), 30) == list(range(5000))
    running = False
    assert sum(per_iteration.values()) == 5000
    assert max(per_iteration.values()) == FRAMES_PER_TURN
    writer.close()
    await listener.close()


async def test_a_client_that_does_not_read_stops_being_read_and_loses_nothing() -> None:
    """With ``kafka.connection.max.unsent.bytes`` of 4 KiB, a client that sends 30,000
    requests and reads nothing: once the kernel's buffers are full the listener holds at most
    about 4 KiB of answers and stops reading the connection; when the client reads, every
    answer comes, in order."""
    listener, port = await start(KafkaFlow(max_unsent_bytes=4096))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
    sock.connect(("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    count = 30_000
    writer.write(api_versions(count))
    conn: Any = None
    for _ in range(500):  # bounded: until the listener pauses this connection
        await asyncio.sleep(0.01)
        conn = next(iter(listener.connections), None)
        if conn is not None and not conn.reading and conn.writing_paused:
            break
    assert conn is not None and conn.writing_paused and not conn.reading
    answer_size = len(listener.served._api_versions_frame(3, 0, 0))
    held = conn.transport.get_write_buffer_size()
    assert 4096 <= held <= 4096 + FRAMES_PER_TURN * answer_size
    await asyncio.sleep(0.2)
    assert conn.transport.get_write_buffer_size() == held  # nothing more was read meanwhile
    assert await asyncio.wait_for(read_answers(reader, count), 60) == list(range(count))
    assert conn.reading and not conn.writing_paused
    writer.close()
    await listener.close()


async def test_at_most_queued_max_requests_are_unanswered() -> None:
    """``queued.max.requests``: answers are written in request order, so requests behind one
    whose answer is not ready stay unanswered; the listener reads no more than the limit."""
    listener, port = await start(KafkaFlow(queued_max_requests=8))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.05)
    (conn,) = listener.connections
    blocker = conn.expect()  # a slot whose answer is not ready (as a forwarded request's)
    writer.write(api_versions(100))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not conn.reading:
            break
    assert len(conn.slots) == 8 and not conn.reading
    conn.complete(blocker, None)
    assert await asyncio.wait_for(read_answers(reader, 100), 30) == list(range(100))
    writer.close()
    await listener.close()


def test_the_limits_are_configured_by_their_names() -> None:
    assert KafkaFlow.from_settings({}) == KafkaFlow()
    assert KafkaFlow.from_settings(
        {
            "queued.max.requests": "16",
            "queued.max.request.bytes": "-1",
            "kafka.connection.max.unsent.bytes": "65536",
        }
    ) == KafkaFlow(
        queued_max_requests=16,
        queued_max_request_bytes=sys.maxsize,
        max_unsent_bytes=65536,
    )
    with pytest.raises(ValueError, match="queued.max.requests must be at least 1, got 0"):
        KafkaFlow.from_settings({"queued.max.requests": "0"})


def test_serve_refuses_a_bad_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--data-dir", str(tmp_path), "--kafka-listen", "127.0.0.1:0"]
    assert main([*argv, "--set", "kafka.connection.max.unsent.bytes=10"]) == 2
    assert "kafka.connection.max.unsent.bytes must be at least 1024, got 10" in (
        capsys.readouterr().err
    )


def join_frame(group: str, correlation_id: int) -> bytes:
    """A ConsumerGroupHeartbeat v1 join of ``group``, sized."""
    entity = wire.build(
        wire.request_class(68, 1),
        group_id=group,
        member_id="bWVtYmVyLWlkLWZvci1mbG93",
        member_epoch=0,
        rebalance_timeout=30000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    payload = wire.request_frame(entity, correlation_id, "flow")
    return struct.pack(">i", len(payload)) + payload


async def test_a_heartbeat_of_another_group_starts_ahead_of_a_storm_of_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,000 members of one group join at once, a connection each (as Kafka's consumers are),
    and a member of another group sends its request last: it is served within the first two
    loop iterations' budgets, not after the storm's first requests (it was the last served)."""
    from coordinator.server.admission import DEFAULT_BUDGET

    served: list[str] = []

    async def serve(self: KafkaApis, *request: Any) -> bytes:
        _conn, key, version, correlation_id, _client_id, frame, pos = request
        served.append(wire.group_of(key, version, frame, pos) or "?")
        return struct.pack(">ii", 4, correlation_id)

    monkeypatch.setattr(KafkaApis, "serve", serve)
    listener, port = await start()
    storm = [await asyncio.open_connection("127.0.0.1", port) for _ in range(1000)]
    other = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.1)  # every connection accepted
    for i, (_reader, writer) in enumerate(storm):
        writer.write(join_frame("storm", i))
    other[1].write(join_frame("other", 0))
    await asyncio.wait_for(read_answers(other[0], 1), 30)
    for reader, _writer in storm:
        await asyncio.wait_for(read_answers(reader, 1), 30)
    assert sorted(served) == ["other"] + ["storm"] * 1000
    assert served.index("other") < 2 * DEFAULT_BUDGET
    for _reader, writer in [*storm, other]:
        writer.close()
    await listener.close()


def test_the_group_a_request_starts_with() -> None:
    """``wire.group_of`` reads the group id of the requests that start with it, in flexible
    and older versions, and nothing from the others or from a body that does not hold it."""

    def frame(key: int, version: int, **fields: Any) -> tuple[bytes, int]:
        payload = wire.request_frame(wire.build(wire.request_class(key, version), fields), 7, "c")
        key_, version_, _correlation, _client, pos = wire.parse_header(payload)
        return payload, pos

    for key, version in ((68, 1), (11, 0), (11, 9), (8, 2), (8, 9), (9, 1), (12, 4), (14, 5)):
        payload, pos = frame(key, version, group_id="the-group")
        assert wire.group_of(key, version, payload, pos) == "the-group"
    payload, pos = frame(9, 8, groups=[{"group_id": "g", "topics": None}])
    assert wire.group_of(9, 8, payload, pos) is None  # OffsetFetch v8+: groups, no group first
    payload, pos = frame(16, 4)
    assert wire.group_of(16, 4, payload, pos) is None  # ListGroups names no group
    payload, pos = frame(68, 1, group_id="the-group")
    assert wire.group_of(68, 1, payload[: pos + 3], pos) is None  # truncated


async def test_every_connection_has_tcp_keepalive_as_kafka_sets_it() -> None:
    """Kafka sets SO_KEEPALIVE on every socket it accepts (SocketServer) and every connection
    it makes (Selector): a peer that vanished without a word — a client gone while its request
    waits for an upstream that never answers — is found out by the kernel and the connection
    closed, not held for ever. Ours: the listener's accepted connections, a client's upstream
    connection and the coordinator's own upstream connections (before: none had it)."""
    from coordinator.server.kafka.upstream.broker import Upstream, UpstreamConnection

    def keepalive(sock: socket.socket) -> int:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)

    listener, port = await start()
    broker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    broker_port = broker.sockets[0].getsockname()[1]
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(200):
            if listener.connections:
                break
            await asyncio.sleep(0.01)
        (conn,) = listener.connections
        assert keepalive(conn.transport.get_extra_info("socket")) == 1
        writer.close()

        class Client:  # what an upstream connection asks of its client connection
            max_unsent_bytes = 1 << 20
            upstream_paused = False

            def fail(self, why: str) -> None:
                raise AssertionError(why)

            def on_upstream_flow(self, paused: bool) -> None:
                pass

        upstream = Upstream(f"127.0.0.1:{broker_port}")
        forwarded = UpstreamConnection(upstream, Client(), ("127.0.0.1", broker_port))  # type: ignore[arg-type]
        await forwarded.task
        assert forwarded.transport is not None
        assert keepalive(forwarded.transport.get_extra_info("socket")) == 1
        forwarded.transport.close()
        _r, own = await upstream.transport.open("127.0.0.1", broker_port)
        assert keepalive(own.transport.get_extra_info("socket")) == 1
        own.close()
    finally:
        broker.close()
        await listener.close()
