"""Our gRPC server on libnghttp2 (``coordinator/server/h2grpc.py``) answers grpc-core clients as
grpc-core's server does: statuses and messages, deadlines (the client's and the server's own),
size limits, gzip/deflate requests, request metadata limits, cancellation, the concurrency
limit, server streams with flow control, health and reflection (bidirectional), and a graceful
stop. Driven by grpc.aio clients and a bare HTTP/2 client (``tests/rawh2.py``) on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import gzip
import logging
import math
import random
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
import uvloop
from builders import LoopSteps
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from ngh2 import NGH2Error
from rawh2 import RawConnection, grpc_frame, header_list_size

from coordinator.server.admission import ReadTurns
from coordinator.server.grpc_options import GrpcOptions
from coordinator.server.grpc_server import add_health_and_reflection
from coordinator.server.h2grpc import H2GrpcServer, format_peer, parse_timeout

SERVICE = "test.Echo"
MAX_BYTES = 64 * 1024
CANCEL = 0x8  # RST_STREAM


class Handlers:
    """Raw-bytes methods of ``test.Echo``; what each call saw, for the assertions."""

    def __init__(self) -> None:
        self.metadata: list[tuple[str, Any]] = []
        self.peer = ""
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.read_chunks = 0

    async def echo(self, request: bytes, context: Any) -> bytes:
        self.metadata = list(context.invocation_metadata())
        self.peer = context.peer()
        return request

    async def abort(self, request: bytes, context: Any) -> bytes:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, request.decode())
        raise AssertionError("abort returns")

    async def crash(self, request: bytes, context: Any) -> bytes:
        raise ValueError("a bug")

    async def wait(self, request: bytes, context: Any) -> bytes:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b"released"

    async def big(self, request: bytes, context: Any) -> bytes:
        return b"x" * (MAX_BYTES + 1)

    async def total(self, requests: AsyncIterator[bytes], context: Any) -> bytes:
        return b"+".join([r async for r in requests])

    async def count(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        for i in range(int(request)):
            self.read_chunks = i
            yield (b"%06d" % i) * 8000  # 48 KB each


async def echo(request: bytes, context: Any) -> bytes:
    return request


async def hold(request: bytes, context: Any) -> bytes:
    await asyncio.Event().wait()  # until cancelled
    return request


def methods(h: Handlers) -> grpc.GenericRpcHandler:
    unary = grpc.unary_unary_rpc_method_handler
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Echo": unary(h.echo),
            "Abort": unary(h.abort),
            "Crash": unary(h.crash),
            "Wait": unary(h.wait),
            "Big": unary(h.big),
            "Count": grpc.unary_stream_rpc_method_handler(h.count),
            "Total": grpc.stream_unary_rpc_method_handler(h.total),
        },
    )


async def started(h: Handlers, server: H2GrpcServer) -> grpc.aio.Channel:
    """``server`` serving ``h``'s methods on 127.0.0.1:0, and a channel to it."""
    server.add_generic_rpc_handlers([methods(h)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}")


@pytest.fixture
async def served() -> AsyncIterator[tuple[H2GrpcServer, Handlers, grpc.aio.Channel, Any]]:
    h = Handlers()
    server = H2GrpcServer(MAX_BYTES, max_concurrent_calls=4)
    health_servicer = health.aio.HealthServicer()
    add_health_and_reflection(server, health_servicer, [SERVICE])
    channel = await started(h, server)
    try:
        yield server, h, channel, health_servicer
    finally:
        await channel.close()
        await server.stop(None)


def unary(channel: grpc.aio.Channel, name: str) -> Any:
    return channel.unary_unary(f"/{SERVICE}/{name}")


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_unary_answer_metadata_and_peer(served: Any) -> None:
    _server, h, channel, _ = served
    answer = await unary(channel, "Echo")(
        b"hello", metadata=(("client-id", "app-1"), ("blob-bin", b"\x00\xff")), timeout=5
    )
    assert answer == b"hello"
    assert ("client-id", "app-1") in h.metadata
    assert ("blob-bin", b"\x00\xff") in h.metadata
    assert not any(k in ("content-type", "te", "grpc-timeout") for k, _ in h.metadata)
    assert h.peer.startswith("ipv4:127.0.0.1:")


async def test_statuses_as_grpc_core_sends_them(served: Any) -> None:
    _server, _h, channel, _ = served
    assert await status_of(unary(channel, "Abort")("no – ünïcode %".encode(), timeout=5)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "no – ünïcode %",
    )
    assert await status_of(unary(channel, "Crash")(b"", timeout=5)) == (
        grpc.StatusCode.UNKNOWN,
        "Unexpected server error.",
    )
    assert await status_of(unary(channel, "Nope")(b"", timeout=5)) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "Method not found!",
    )


async def test_size_limits_both_ways(served: Any) -> None:
    _server, _h, channel, _ = served
    too_big = b"y" * (MAX_BYTES + 1)
    assert await status_of(unary(channel, "Echo")(too_big, timeout=5)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"SERVER: Received message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
    )
    assert await status_of(unary(channel, "Big")(b"", timeout=5)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"SERVER: Sent message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
    )
    # the connection still serves
    assert await unary(channel, "Echo")(b"after", timeout=5) == b"after"


async def test_deadline_cancels_the_handler(served: Any) -> None:
    _server, h, channel, _ = served
    assert await status_of(unary(channel, "Wait")(b"", timeout=0.3)) == (
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "Deadline Exceeded",
    )
    await asyncio.wait_for(h.cancelled.wait(), 5)


async def test_client_cancel_cancels_the_handler(served: Any) -> None:
    _server, h, channel, _ = served
    call = unary(channel, "Wait")(b"", timeout=10)
    await asyncio.wait_for(h.started.wait(), 5)
    call.cancel()
    await asyncio.wait_for(h.cancelled.wait(), 5)


async def test_concurrency_limit_refuses_before_any_work(served: Any) -> None:
    server, h, channel, _ = served
    waiting = [unary(channel, "Wait")(b"", timeout=10) for _ in range(4)]
    await asyncio.wait_for(h.started.wait(), 5)
    for _ in range(100):
        if server.active == 4:
            break
        await asyncio.sleep(0.01)
    assert server.active == 4
    assert await status_of(unary(channel, "Echo")(b"", timeout=5)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Concurrent RPC limit exceeded!",
    )
    h.release.set()
    assert [await c for c in waiting] == [b"released"] * 4
    assert server.active == 0
    assert await unary(channel, "Echo")(b"ok", timeout=5) == b"ok"


async def test_server_stream_is_flow_controlled(served: Any) -> None:
    """600 messages of 48 KB (29 MB) to a client that reads slowly: the handler is held back
    once its message has not gone through the client's window (grpc-core's write); every
    message arrives, in order. The client's window is kept at its initial size (no
    bandwidth-delay probing, which grows it by as much as it likes)."""
    server, h, _channel, _ = served
    port = server._sockets[0].getsockname()[1]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)])
    call = channel.unary_stream(f"/{SERVICE}/Count")(b"600", timeout=30)
    received = 0
    ahead: list[int] = []
    async for item in call:
        assert item == (b"%06d" % received) * 8000
        if received < 5:
            await asyncio.sleep(0.2)
            ahead.append(h.read_chunks)
        received += 1
    assert received == 600
    await channel.close()
    # held back: measured 2 messages ahead (what the client's 64 KiB window takes, and the
    # message waiting on it; 24, 1.2 MB, when a stream queued up to 1 MiB), one more for each
    # message the client reads, none while it sleeps
    assert ahead[0] <= 3 and max(ahead) - min(ahead) <= 8, ahead
    assert await call.code() == grpc.StatusCode.OK


async def test_health_check_watch_and_reflection(served: Any) -> None:
    _server, _h, channel, health_servicer = served
    stub = health_pb2_grpc.HealthStub(channel)
    check = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    assert await status_of(stub.Check(health_pb2.HealthCheckRequest(service="x"), timeout=5)) == (
        grpc.StatusCode.NOT_FOUND,
        "",
    )
    watch = stub.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    seen = [(await watch.read()).status]
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    seen.append((await watch.read()).status)
    watch.cancel()
    assert seen == [
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    ]

    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.health.v1.Health"),
    ]
    answers = [a async for a in reflection.ServerReflectionInfo(iter(requests), timeout=5)]
    assert sorted(s.name for s in answers[0].list_services_response.service) == sorted(
        [SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]
    )
    assert answers[1].file_descriptor_response.file_descriptor_proto


async def test_stop_finishes_calls_in_flight_and_refuses_new_connections() -> None:
    h = Handlers()
    server = H2GrpcServer(MAX_BYTES)
    channel = await started(h, server)
    try:
        port = server._sockets[0].getsockname()[1]
        in_flight = unary(channel, "Wait")(b"", timeout=10)
        await asyncio.wait_for(h.started.wait(), 5)
        stopping = asyncio.ensure_future(server.stop(5.0))
        await asyncio.sleep(0.1)
        assert not stopping.done()  # waiting for the call in flight
        h.release.set()
        assert await in_flight == b"released"
        await asyncio.wait_for(stopping, 5)
        fresh = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        code, _ = await status_of(unary(fresh, "Echo")(b"", timeout=2))
        await fresh.close()
        assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await channel.close()


async def test_stop_past_its_grace_answers_unavailable() -> None:
    h = Handlers()
    server = H2GrpcServer(MAX_BYTES)
    channel = await started(h, server)
    try:
        in_flight = unary(channel, "Wait")(b"", timeout=10)
        await asyncio.wait_for(h.started.wait(), 5)
        await server.stop(0.2)
        code, _ = await status_of(in_flight)
        assert code == grpc.StatusCode.UNAVAILABLE
        assert h.cancelled.is_set()
    finally:
        await channel.close()


def test_timeouts_and_peers_parse_like_grpc() -> None:
    assert parse_timeout(b"100m") == pytest.approx(0.1)
    assert parse_timeout(b"2S") == 2.0
    assert parse_timeout(b"1H") == 3600.0
    assert parse_timeout(b"5000000u") == pytest.approx(5.0)
    # grpc-core's leniency: up to 1,000,000,000 (the spec: 8 digits), larger is no deadline
    assert parse_timeout(b"123456789S") == 123456789.0
    assert parse_timeout(b"1000000000m") == pytest.approx(1e6)
    assert parse_timeout(b"0000000001S") == 1.0
    assert parse_timeout(b"1000000001S") == math.inf
    assert parse_timeout(b"9" * 5000 + b"H") == math.inf
    assert parse_timeout(b"1 S") == 1.0
    assert parse_timeout(b"10x") is None
    assert parse_timeout(b"S") is None
    assert parse_timeout(b"1") is None
    assert parse_timeout(b"1.5S") is None
    assert parse_timeout(b"-1S") is None
    assert parse_timeout(b"1s") is None
    assert format_peer(("127.0.0.1", 5)) == "ipv4:127.0.0.1:5"
    assert format_peer(("::ffff:10.0.0.1", 6, 0, 0)) == "ipv4:10.0.0.1:6"
    assert format_peer(("::1", 7, 0, 0)) == "ipv6:[::1]:7"


def test_a_connection_s_client_host_is_what_grpc_s_peer_string_gives() -> None:
    """Our server works out a call's ClientHost once per connection (``h2wire.client_host``);
    grpc.aio's calls read it of the peer string (``services.client_host_of``): the same."""
    from types import SimpleNamespace

    from coordinator.server.h2wire import client_host
    from coordinator.server.services import client_host_of

    addresses: list[Any] = [("127.0.0.1", 5), ("::ffff:10.0.0.1", 6, 0, 0), ("::1", 7, 0, 0)]
    hosts = [client_host(a) for a in [*addresses, "/tmp/s", None]]
    assert hosts == ["/127.0.0.1", "/10.0.0.1", "/::1", "/unix:/tmp/s", ""]
    for address in [*addresses, "/tmp/s", None]:
        context = SimpleNamespace(peer=lambda a=address: format_peer(a))
        assert client_host_of(context) == client_host(address)  # type: ignore[arg-type]


def test_a_busy_port_is_an_oserror() -> None:
    first = H2GrpcServer(MAX_BYTES)
    port = first.add_insecure_port("127.0.0.1:0")
    second = H2GrpcServer(MAX_BYTES)
    try:
        with pytest.raises(OSError):
            second.add_insecure_port(f"127.0.0.1:{port}")
    finally:
        for sock in first._sockets:
            sock.close()


async def test_client_streaming_call(served: Any) -> None:
    _server, _h, channel, _ = served
    answer = await channel.stream_unary(f"/{SERVICE}/Total")(iter([b"a", b"b", b"c"]), timeout=5)
    assert answer == b"a+b+c"


async def raw_exchange(
    port: int,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    trailers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[dict[bytes, bytes], bytes]:
    """One request from a bare HTTP/2 client: the response's headers and trailers merged, and
    its body. ``trailers``: the request ends with them, not with its last DATA."""
    conn = await RawConnection.open(port)
    try:
        stream_id = conn.request(f"/{SERVICE}/Echo", body, headers=headers, trailers=trailers)
        assert await conn.until(lambda: conn.answered(stream_id), 5), "no answer"
        answer = conn.answers[stream_id]
        return answer.fields, answer.data
    finally:
        conn.close()


async def test_what_grpc_clients_never_send_is_refused_clearly(served: Any) -> None:
    server, _h, _channel, _ = served
    port = server._sockets[0].getsockname()[1]
    grpc_type: list[tuple[bytes, bytes]] = []  # what RawConnection sends anyway
    # not gRPC at all
    answer, _ = await raw_exchange(port, [(b"content-type", b"text/plain")], b"hi")
    assert answer[b":status"] == b"415"
    # a malformed deadline
    answer, _ = await raw_exchange(port, [*grpc_type, (b"grpc-timeout", b"soon")], grpc_frame(b"x"))
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (
        b"13",
        b"Error parsing 'grpc-timeout' metadata",
    )
    # binary metadata that is not base64
    answer, _ = await raw_exchange(port, [*grpc_type, (b"x-bin", b"!!!")], grpc_frame(b"x"))
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (
        b"13",
        b"Error parsing 'x-bin' metadata: illegal base64 encoding",
    )
    # two messages in a unary call
    answer, _ = await raw_exchange(port, grpc_type, grpc_frame(b"a") + grpc_frame(b"b"))
    assert answer[b"grpc-status"] == b"13"
    assert answer[b"grpc-message"] == b"More than one request message in a unary call"
    # no message, and a truncated one
    answer, _ = await raw_exchange(port, grpc_type, b"")
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (b"13", b"Missing request message")
    answer, _ = await raw_exchange(port, grpc_type, grpc_frame(b"abc")[:-1])
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (
        b"13",
        b"Incomplete request message",
    )
    # and a well-formed one, answered with the gRPC headers
    answer, data = await raw_exchange(port, grpc_type, grpc_frame(b"fine"))
    assert answer[b":status"] == b"200" and answer[b"content-type"] == b"application/grpc"
    assert answer[b"grpc-status"] == b"0" and data == grpc_frame(b"fine")
    # a request that ends with trailers (HTTP/2 allows it; gRPC clients send none) is complete
    answer, data = await raw_exchange(
        port, grpc_type, grpc_frame(b"trailed"), trailers=[(b"x-end", b"1")]
    )
    assert (answer[b"grpc-status"], data) == (b"0", grpc_frame(b"trailed"))
    assert server.active == 0


async def test_unknown_methods_are_unimplemented_and_not_remembered(served: Any) -> None:
    """300 calls naming 300 methods the server does not have (long paths, as a scanner or a
    hostile client sends) are each answered UNIMPLEMENTED "Method not found!", and the server
    keeps nothing of them: what it remembers of paths is its own methods (before, it kept every
    path asked for: 20,000 paths of 4 KB grew it by 78 MB for good, without bound)."""
    server, _h, channel, _ = served
    port = server._sockets[0].getsockname()[1]
    assert await unary(channel, "Echo")(b"known", timeout=5) == b"known"
    known = dict(server._by_path)
    conn = await RawConnection.open(port)
    try:
        calls = [
            conn.request(f"/no.Such/M{i:03d}" + "x" * 4000, grpc_frame(b""), flush=False)
            for i in range(300)
        ]
        conn.flush()
        assert await conn.until(lambda: conn.answered(*calls), 10)
        assert [conn.answers[c].outcome for c in calls] == [(b"12", b"Method not found!")] * 300
    finally:
        conn.close()
    assert server._by_path == known


async def test_garbage_ends_its_connection_quietly(
    served: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes that are not HTTP/2 (or break it after the preface) close that connection, log
    no error, and the server goes on serving."""
    server, _h, channel, _ = served
    port = server._sockets[0].getsockname()[1]
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    rng = random.Random(7)
    inputs = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        bytes(rng.randrange(256) for _ in range(4096)),
        *(
            preface + bytes(rng.randrange(256) for _ in range(rng.randint(1, 2048)))
            for _ in range(30)
        ),
    ]
    with caplog.at_level(logging.DEBUG, logger="kip848.server"):
        for data in inputs:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            try:
                while await asyncio.wait_for(reader.read(65536), 5):
                    pass  # until the server closes it
            except ConnectionResetError:
                pass
            writer.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert await unary(channel, "Echo")(b"still here", timeout=5) == b"still here"
    assert server.active == 0


def frames_in(data: bytes) -> list[tuple[int, bytes]]:
    """The HTTP/2 frames in ``data``: (type, payload)."""
    out, pos = [], 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        out.append((data[pos + 3], data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


@pytest.mark.parametrize("kind", ["SETTINGS", "PRIORITY"])
async def test_a_flood_of_control_frames_ends_that_connection_alone(served: Any, kind: str) -> None:
    """A client sends 20,000 empty SETTINGS (each owes it an acknowledgement) or PRIORITY frames
    (new streams' priorities, which gRPC ignores) as fast as it can: libnghttp2's flood
    defences end that connection (more than 1,000 acknowledgements owed at once: closed without
    GOAWAY; past 10,000 such frames then 330 a second: GOAWAY ENHANCE_YOUR_CALM), the server
    goes on, and another connection's call is served. (grpc-core takes both floods: docs/operations.md lists the
    difference.)"""
    server, _h, channel, _ = served
    port = server._sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5))
    if kind == "SETTINGS":
        flood = (bytes(3) + b"\x04" + bytes(5)) * 20_000
    else:  # PRIORITY of streams 1, 3, 5 ...: weight 16, no dependency
        flood = b"".join(
            b"\x00\x00\x05\x02\x00" + (2 * i + 1).to_bytes(4, "big") + b"\x00\x00\x00\x00\x0f"
            for i in range(20_000)
        )
    writer.write(flood)
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(1 << 16), 5):
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        writer.close()
    goaways = [payload for frame, payload in frames_in(data) if frame == 0x7]
    # an acknowledgement flood is dropped at once, without GOAWAY (libnghttp2's choice)
    assert goaways == ([] if kind == "SETTINGS" else [bytes(4) + (0xB).to_bytes(4, "big")])
    assert await unary(channel, "Echo")(b"still here", timeout=5) == b"still here"
    assert server.active == 0


class RawCalls:
    """Unary calls written by a bare HTTP/2 client on one connection, all at once: :meth:`send`
    writes them, :meth:`statuses` reads until every one has ended."""

    def __init__(self, conn: RawConnection, stream_ids: list[int]) -> None:
        self.conn, self.stream_ids = conn, stream_ids

    @classmethod
    async def open(
        cls,
        port: int,
        method: str,
        payloads: list[bytes],
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> RawCalls:
        conn = await RawConnection.open(port)
        path = f"/{SERVICE}/{method}"
        ids = [
            conn.request(path, grpc_frame(p), headers=headers or (), flush=False) for p in payloads
        ]
        return cls(conn, ids)

    def send(self) -> None:
        self.conn.flush()

    async def answers(self, close: bool = True) -> list[tuple[bytes | None, bytes]]:
        """(grpc-status, grpc-message) of every call, in the order they were sent, once all
        have ended (then the connection is closed, unless ``close`` is False)."""
        conn = self.conn
        await conn.until(lambda: conn.answered(*self.stream_ids), 10)
        if close:
            conn.close()
        ended = sum(conn.answers[s].closed for s in self.stream_ids)
        assert ended == len(self.stream_ids), f"{ended} of {len(self.stream_ids)} calls ended"
        return [conn.answers[s].outcome for s in self.stream_ids]

    async def statuses(self, calls: int) -> list[bytes | None]:
        assert calls == len(self.stream_ids)
        return [status for status, _ in await self.answers()]


async def serving(
    method: str, handler: Callable[[bytes, Any], Any], max_bytes: int = MAX_BYTES, **options: Any
) -> tuple[H2GrpcServer, int]:
    """A server (``options``) on 127.0.0.1:0 with ``Echo`` and one more unary method of
    ``test.Echo``, and its port."""
    server = H2GrpcServer(max_bytes, **options)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    name: grpc.unary_unary_rpc_method_handler(run)
                    for name, run in {"Echo": echo, method: handler}.items()
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def count_handled(monkeypatch: pytest.MonkeyPatch, iterations: LoopSteps) -> Counter[int]:
    """Bytes the server's connections hand to libnghttp2, per loop iteration."""
    from coordinator.server import h2conn

    handled: Counter[int] = Counter()
    receive = h2conn.H2Connection._receive

    def counted(self: h2conn.H2Connection, data: memoryview) -> bool:
        handled[iterations.now] += len(data)
        return receive(self, data)

    monkeypatch.setattr(h2conn.H2Connection, "_receive", counted)
    return handled


async def storm_on_connections(
    port: int, connections: int, calls: int
) -> tuple[list[RawCalls], list[bytes]]:
    """``connections`` connections with ``calls`` unary ``Mark`` calls each, not yet sent; the
    payloads of each connection's calls (``CCIII``: connection, call) in order."""
    storm = [
        await RawCalls.open(port, "Mark", [b"%02d%03d" % (c, i) for i in range(calls)])
        for c in range(connections)
    ]
    return storm, [b"%02d%03d" % (c, i) for c in range(connections) for i in range(calls)]


async def serving_recorded() -> tuple[Any, int, list[bytes]]:
    """A server whose method Mark answers each request with itself, and the list of the
    requests its handler ran, in order."""
    ran: list[bytes] = []

    async def mark(request: bytes, context: Any) -> bytes:
        ran.append(request)
        return request

    server, port = await serving("Mark", mark)
    return server, port, ran


async def test_a_burst_on_many_connections_is_read_a_bounded_part_per_loop_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 connections send 500 calls each at once (a join storm's shape): the server's
    connections handle at most ``READ_BUDGET`` bytes of them per loop iteration in all (and
    ``READ_QUANTUM`` more per connection reading afresh), each connection's rest read in later
    iterations, in turn (``admission.ReadTurns``) — one iteration used to read and start every
    call in the burst, a call read on another connection waiting for all of it; every call is
    answered, each connection's in order."""
    from coordinator.server import h2conn

    server, port, order = await serving_recorded()
    storm, sent = await storm_on_connections(port, 20, 500)
    try:
        with LoopSteps() as iterations:
            handled = count_handled(monkeypatch, iterations)
            for calls in storm:
                calls.send()
            statuses = await asyncio.wait_for(
                asyncio.gather(*(calls.statuses(500) for calls in storm)), 30
            )
        assert statuses == [[b"0"] * 500] * 20
        for c in range(20):
            assert [p for p in order if p[:2] == b"%02d" % c] == sent[c * 500 : (c + 1) * 500]
        assert sum(handled.values()) > 4 * h2conn.READ_BUDGET  # the burst took several turns
        bound = h2conn.READ_BUDGET + 20 * h2conn.READ_QUANTUM
        assert max(handled.values()) <= bound, (max(handled.values()), bound)
    finally:
        await server.stop(None)


async def test_a_quiet_connections_call_is_read_ahead_of_other_connections_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While 20 connections' burst waits to be read (``admission.ReadTurns``, a budget of 4 KiB
    per iteration here), a call arriving on a quiet connection is read in the iteration it
    arrives in and started in the next one or two, long before the burst is read: it does not
    queue behind the connections that wait for their turn (it did: read after each of
    them)."""
    from coordinator.server import h2conn

    started: dict[bytes, int] = {}
    arrived: list[int] = []
    first = asyncio.Event()

    async def mark(request: bytes, context: Any) -> bytes:
        started[request] = iterations.now
        first.set()
        return request

    received = h2conn.H2Connection.data_received

    def arriving(self: h2conn.H2Connection, data: bytes) -> None:
        if b"lone" in data:
            arrived.append(iterations.now)
        received(self, data)

    monkeypatch.setattr(h2conn.H2Connection, "data_received", arriving)
    server, port = await serving("Mark", mark)
    server.reads = ReadTurns(4 << 10)  # the burst read over a hundred iterations
    storm, sent = await storm_on_connections(port, 20, 500)
    lone = await RawCalls.open(port, "Mark", [b"lone"])
    try:
        with LoopSteps() as iterations:
            handled = count_handled(monkeypatch, iterations)
            for calls in storm:
                calls.send()
            await asyncio.wait_for(first.wait(), 10)
            lone.send()
            statuses = await asyncio.wait_for(
                asyncio.gather(lone.statuses(1), *(calls.statuses(500) for calls in storm)), 30
            )
        assert statuses == [[b"0"]] + [[b"0"] * 500] * 20
        assert sorted(started) == sorted([*sent, b"lone"])
        assert len(arrived) == 1
        assert arrived[0] + 50 < max(handled)  # the burst was still being read when it arrived
        assert started[b"lone"] - arrived[0] <= 2, (arrived, started[b"lone"], max(handled))
    finally:
        await server.stop(None)


async def test_a_burst_on_one_connection_does_not_hold_back_another_connections_call() -> None:
    """3,000 calls arrive at once on one connection, then one on another: the lone call is
    started within a turn or two of its arrival (``admission.py``: at most ``DEFAULT_BUDGET``
    calls start per loop iteration, then one per connection in turn), long before the burst's
    last call, not after all of them; each connection's calls keep their order, and every call
    is answered."""
    order: list[bytes] = []
    first = asyncio.Event()

    async def mark(request: bytes, context: Any) -> bytes:
        order.append(request)
        first.set()
        return request

    server, port = await serving("Mark", mark)
    burst = [b"a%04d" % i for i in range(3000)]
    a = await RawCalls.open(port, "Mark", burst)
    b = await RawCalls.open(port, "Mark", [b"lone"])
    a.send()  # the burst; once the server has read it and started calls, the lone call
    await asyncio.wait_for(first.wait(), 10)
    b.send()
    try:
        answers = await asyncio.gather(a.statuses(len(burst)), b.statuses(1))
        assert answers == [[b"0"] * len(burst), [b"0"]]
        assert sorted(order) == sorted([*burst, b"lone"])
        assert [p for p in order if p != b"lone"] == burst  # a connection's calls in order
        # it arrived a few loop iterations into the burst (the client writes it once the
        # server has started the burst's first calls), and started within two iterations
        assert order.index(b"lone") < len(burst) // 3, order.index(b"lone")
        assert server.admission.waiting == 0
    finally:
        await server.stop(None)


async def test_a_call_of_another_group_starts_ahead_of_a_storms_burst_on_its_connection() -> None:
    """Calls start fairly between the groups their requests name (``group_of``): 3,000 calls of
    group ``a`` and then one of group ``b``, all on one connection (members of two groups can
    share one), sent at once: ``b``'s call starts in the iteration after it is read (the burst
    takes a few reads), not after the storm (as it did when a connection's calls started in
    order); the storm's calls keep their order."""
    server, port, order = await serving_recorded()
    server.group_of = lambda path, request: request[:1]  # the group: the first byte
    burst = [b"a%04d" % i for i in range(3000)]
    calls = await RawCalls.open(port, "Mark", [*burst, b"b-lone"])
    calls.send()
    try:
        assert set(await calls.statuses(len(burst) + 1)) == {b"0"}
        assert [p for p in order if p != b"b-lone"] == burst
        assert order.index(b"b-lone") < 5 * 64, order.index(b"b-lone")  # 64 a loop iteration
    finally:
        await server.stop(None)


async def test_calls_waiting_their_turn_take_no_slot() -> None:
    """``max_concurrent_calls`` 16: one connection sends 3,000 calls of group ``a`` at once, then
    another connection one of group ``b``. A call takes a slot when its handler starts, not
    while it waits its turn (the connection's bound on what it holds unread bounds those), so
    none is refused: every call is answered, ``b``'s within a few turns. (Before, the calls
    waiting took slots: past 16 waiting, ``a``'s next calls were refused, and so was ``b``'s,
    one client's flood refusing every group.)"""
    order: list[bytes] = []
    first = asyncio.Event()

    async def mark(request: bytes, context: Any) -> bytes:
        order.append(request)
        first.set()
        return request

    server, port = await serving("Mark", mark, max_concurrent_calls=16)
    server.group_of = lambda path, request: request[:1]
    burst = [b"a%04d" % i for i in range(3000)]
    a = await RawCalls.open(port, "Mark", burst)
    b = await RawCalls.open(port, "Mark", [b"b-lone"])
    try:
        a.send()
        await asyncio.wait_for(first.wait(), 10)
        b.send()
        assert await asyncio.gather(a.answers(), b.answers()) == [
            [(b"0", b"")] * len(burst),
            [(b"0", b"")],
        ]
        assert [p for p in order if p != b"b-lone"] == burst
        assert order.index(b"b-lone") < len(burst) // 3, order.index(b"b-lone")
        assert (server.active, server.admission.waiting) == (0, 0)
    finally:
        await server.stop(None)


async def test_a_stop_answers_the_calls_still_waiting_for_their_turn() -> None:
    """A stop while 500 calls are in: the ones running are cancelled and the ones not started
    yet are answered too, every one UNAVAILABLE; none is left without a status."""
    started = asyncio.Event()

    async def hold(request: bytes, context: Any) -> bytes:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return request

    server, port = await serving("Hold", hold)
    calls = await RawCalls.open(port, "Hold", [b"%03d" % i for i in range(500)])
    calls.send()
    await asyncio.wait_for(started.wait(), 10)
    assert server.admission.waiting > 0
    stopped = asyncio.ensure_future(server.stop(None))
    assert await calls.statuses(500) == [b"14"] * 500
    await asyncio.wait_for(stopped, 10)
    assert server.admission.waiting == 0


async def test_a_call_reset_in_the_bytes_that_brought_it_never_starts() -> None:
    """300 calls each sent whole and reset by the client (RST_STREAM CANCEL) in the same write,
    the "rapid reset" flood's shape: their handlers do not run (a call starts at the end of
    the slice of bytes its message came in, after the reset that came with it; at most a call
    split over two slices may start), the server answers none of them, and the connection's
    next call is served. (Before, a call whose request ended started at once: the first 64 of
    every loop iteration ran and were answered, the others waited their turn.)"""
    server, port, ran = await serving_recorded()
    conn = await RawConnection.open(port)
    try:
        streams, out = [], b""
        for i in range(300):  # each call, then its reset; all in one write
            streams.append(conn.request(f"/{SERVICE}/Mark", grpc_frame(b"%03d" % i), flush=False))
            out += conn.h2.data_to_send()
            conn.h2.reset_stream(streams[-1], CANCEL)
            out += conn.h2.data_to_send()
        conn.writer.write(out)
        after = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"after"))
        assert await conn.until(lambda: conn.answered(after), 10)
        assert (conn.answers[after].outcome, conn.answers[after].data) == (
            (b"0", b""),
            grpc_frame(b"after"),
        )
        assert len(ran) <= 2, ran
        assert [s for s in streams if conn.answers[s].headers] == []
        assert (server.active, server.admission.waiting) == (0, 0)
    finally:
        conn.close()
        await server.stop(None)


async def test_calls_reset_while_they_wait_their_turn_are_forgotten() -> None:
    """A client sends 20 rounds of 500 whole calls, each round's resets in the write after it
    (so its calls are read, and wait their turn, before they are reset), as fast as it can:
    the calls waiting to start never number more than about twice those alive (a sweep drops
    the ones reset), those reset take no turn, and the connection's next call is served.
    (Before, every call reset kept its place until its turn came, 64 a loop iteration: the
    queue grew by the flood's rate, 9,000 here, a rapid-reset client's calls without bound.)"""
    peak = 0
    server, port, ran = await serving_recorded()
    conn = await RawConnection.open(port)

    def watch() -> None:
        nonlocal peak
        peak = max(peak, server.admission.waiting)
        if running:
            asyncio.get_running_loop().call_soon(watch)

    running = True
    watch()
    try:
        for _ in range(20):
            streams = [
                conn.request(f"/{SERVICE}/Mark", grpc_frame(b"x"), flush=False) for _ in range(500)
            ]
            conn.flush()
            for stream_id in streams:
                conn.h2.reset_stream(stream_id, CANCEL)
            conn.flush()
        after = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"after"))
        assert await conn.until(lambda: conn.answered(after), 10)
        assert conn.answers[after].outcome == (b"0", b"")
        assert peak <= 2 * 500 + 64, peak
        assert len(ran) < 20 * 500 // 4, len(ran)
        assert (server.active, server.admission.waiting) == (0, 0)
    finally:
        running = False
        conn.close()
        await server.stop(None)


# ------------------------------------------------------------------ deadlines the server enforces


def test_a_server_side_deadline_is_always_answered() -> None:
    """Calls with a raw ``grpc-timeout`` (a client that does not enforce its own deadline) to a
    handler that never returns, 50 at once, on uvloop (the server's default loop), whose timer
    can fire before the handler's task has taken its first step: every call is answered
    DEADLINE_EXCEEDED and gives its slot back. (A task cancelled before its first step never
    runs: 16-50 of 50 got no status at all before.)"""

    async def scenario() -> None:
        server, port = await serving("Hold", hold)
        try:
            for timeout in (b"1n", b"1u", b"1m"):
                calls = await RawCalls.open(port, "Hold", [b"x"] * 50, [(b"grpc-timeout", timeout)])
                calls.send()
                assert await calls.answers() == [(b"4", b"Deadline Exceeded")] * 50, timeout
                assert server.active == 0
        finally:
            await server.stop(None)

    uvloop.run(scenario())


def test_expired_calls_on_one_connection_do_not_lock_others_out() -> None:
    """``max_concurrent_calls`` 16: one connection sends 160 calls with ``grpc-timeout: 1m`` and
    never resets them; 16 are taken, and answered DEADLINE_EXCEEDED when it passes, the others
    are refused as their turn comes (at least the rest of the first turn's 64), or answered
    DEADLINE_EXCEEDED if it passes while they wait; while that connection stays open, another
    client's call is served."""

    async def scenario() -> None:
        server, port = await serving("Hold", hold, max_concurrent_calls=16)
        try:
            flood = await RawCalls.open(port, "Hold", [b"x"] * 160, [(b"grpc-timeout", b"1m")])
            flood.send()
            answers = Counter(await flood.answers(close=False))
            expired, refused = (
                (b"4", b"Deadline Exceeded"),
                (b"8", b"Concurrent RPC limit exceeded!"),
            )
            assert set(answers) == {expired, refused}, answers
            assert answers[expired] >= 16 and answers[refused] >= 64 - 16, answers
            assert answers.total() == 160
            other = await RawCalls.open(port, "Echo", [b"after"])
            other.send()
            assert await other.answers() == [(b"0", b"")]
            assert server.active == 0
            flood.conn.close()
        finally:
            await server.stop(None)

    uvloop.run(scenario())


def test_streams_whose_requests_have_not_come_take_no_slot() -> None:
    """``max_concurrent_calls`` 16: one client opens 40 streams and sends nothing on them (no
    message, no end). Another client's call is served meanwhile: a call takes a slot once its
    request is whole, so streams that send nothing cannot lock every other client out (they
    did: refused "Concurrent RPC limit exceeded!" until those streams closed; 11,000 such
    streams, about 100 KB from one client, did it to a server at its defaults). Once the 40
    send their requests the limit holds as before: 16 run, 24 are refused."""

    async def scenario() -> None:
        server, port = await serving("Hold", hold, max_concurrent_calls=16)
        idle = await RawConnection.open(port)
        try:
            streams = [idle.request(f"/{SERVICE}/Hold", None, end=False) for _ in range(40)]
            for _ in range(100):  # until the server has them all
                if sum(len(c.calls) for c in server.connections) == 40:
                    break
                await asyncio.sleep(0.01)
            assert sum(len(c.calls) for c in server.connections) == 40
            other = await RawCalls.open(port, "Echo", [b"served"])
            other.send()
            assert await other.answers() == [(b"0", b"")]
            for stream_id in streams:
                idle.send(stream_id, grpc_frame(b"x"), end=True)
            refused = (b"8", b"Concurrent RPC limit exceeded!")
            assert await idle.until(
                lambda: sum(idle.answers[s].outcome == refused for s in streams) == 24, 10
            )
            assert server.active == 16
            assert [idle.answers[s].closed for s in streams].count(False) == 16
        finally:
            idle.close()
            for _ in range(100):
                if server.active == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.active == 0
            await server.stop(None)

    uvloop.run(scenario())


async def test_a_connection_holds_a_bounded_number_of_streams_that_send_nothing() -> None:
    """A stream whose request has not come counts its header list and 1 KiB
    (``h2flow.ARRIVING_CALL_BYTES``) against what its connection may hold of requests no call
    has read (one message limit and 256 windows: 320 KiB with 1 KiB windows here). A client
    opening 400 streams that send nothing has the first that fit taken and the rest refused
    RESOURCE_EXHAUSTED with that limit's words; the connection goes on, and once it resets
    ten of them a new call on it is served. (Before, every one was held, without bound.)"""
    options = GrpcOptions(http2_lookahead_bytes=1024)
    server, port = await serving("Hold", hold, options=options)
    conn = await RawConnection.open(port)
    limit = MAX_BYTES + 256 * 1024
    held = header_list_size(RawConnection.base_headers(f"/{SERVICE}/Hold")) + 1024
    taken = limit // held
    try:
        streams = [conn.request(f"/{SERVICE}/Hold", None, end=False) for _ in range(400)]
        assert await conn.until(lambda: conn.answered(*streams[taken:]), 10)
        refused = [conn.answers[s].outcome for s in streams[taken:]]
        assert refused == [
            (
                b"8",
                b"Request data this connection sent and no call has read is over the limit "
                b"(%d vs. %d)" % ((taken + 1) * held, limit),
            )
        ] * (400 - taken)
        assert not any(conn.answers[s].closed for s in streams[:taken])
        for stream_id in streams[:10]:
            conn.h2.reset_stream(stream_id, CANCEL)
        after = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"after"))
        assert await conn.until(lambda: conn.answered(after), 10)
        assert (conn.answers[after].outcome, conn.answers[after].data) == (
            (b"0", b""),
            grpc_frame(b"after"),
        )
        assert (conn.goaways, conn.eof) == ([], False)
    finally:
        conn.close()
        await server.stop(None)


async def read_giving_windows_back(conn: RawConnection, streams: list[int]) -> None:
    """A client that opens its flow-control windows only by what it has read: it gives back
    what came, then reads what that lets through, until every one of ``streams`` is answered
    (at most 1,000 rounds: the caller's assertions say what is missing)."""
    given: dict[int, int] = {}

    def received() -> int:
        return sum(len(a.data) for a in conn.answers.values())

    for _ in range(1000):
        for stream_id, got in conn.answers.items():
            if len(got.data) > given.get(stream_id, 0):
                try:
                    conn.h2.acknowledge_received_data(
                        len(got.data) - given.get(stream_id, 0), stream_id
                    )
                except (NGH2Error, ValueError):
                    pass  # closed meanwhile
                given[stream_id] = len(got.data)
        conn.flush()
        before = received()
        if conn.answered(*streams):
            return
        await conn.until(lambda b=before: received() > b, 5)


async def test_a_client_that_keeps_its_windows_shut_gets_no_more_answers_until_it_opens_them() -> (
    None
):
    """A client reads its socket but gives no window back (its 64 KiB in all) and sends 200
    calls answered 60,000 bytes each: once the answers its windows hold back pass a message
    limit, its next calls wait (not started, still counted as requests unread, so their number
    is bounded too) while another client is served; as it gives its windows back, they start,
    in order, and every one is answered in full. (Before, each call ran at once and its answer
    waited in the server: 100 answers, 6 MB, and as many as the client sent, without bound;
    grpc.aio holds them too.)"""
    ran: list[bytes] = []
    answer = b"x" * 60_000

    async def big(request: bytes, context: Any) -> bytes:
        ran.append(request)
        return answer

    server, port = await serving("Big", big)
    conn = await RawConnection.open(port, auto_window_update=False)
    other = await RawConnection.open(port)

    try:
        streams = [
            conn.request(f"/{SERVICE}/Big", grpc_frame(b"%03d" % i), flush=False)
            for i in range(100)
        ]
        conn.flush()
        await conn.until(lambda: False, 1.0)
        assert len(ran) <= 3, len(ran)
        (held,) = [c for c in server.connections if c.calls]
        assert held.h2.queued_body_size() <= MAX_BYTES + len(grpc_frame(answer))
        served = other.request(f"/{SERVICE}/Echo", grpc_frame(b"ok"))
        assert await other.until(lambda: other.answered(served), 5)
        assert other.answers[served].outcome == (b"0", b"")
        await read_giving_windows_back(conn, streams)
        assert [(conn.answers[s].outcome, conn.answers[s].data) for s in streams] == [
            ((b"0", b""), grpc_frame(answer))
        ] * 100
        assert ran == [b"%03d" % i for i in range(100)]
        assert (server.active, conn.goaways, conn.eof) == (0, [], False)
    finally:
        conn.close()
        other.close()
        await server.stop(None)


async def test_a_client_that_keeps_its_windows_shut_gets_a_bounded_number_of_small_answers() -> (
    None
):
    """The same client sends 3,000 calls answered 100 bytes each (a message limit of 16 MiB, so
    the bytes held back stay far under it): once the answers of ``HELD_ANSWERS`` calls wait for
    its windows (each holds its stream, 1.5 KB however small), its next calls wait unstarted;
    as it gives its windows back every call is answered, in order. (Before, every call ran and
    its answer waited: 30,000 such calls held 40 MB, and as many as the client sent.)"""
    from coordinator.server.h2conn import HELD_ANSWERS

    ran: list[bytes] = []
    answer = b"a" * 100

    async def small(request: bytes, context: Any) -> bytes:
        ran.append(request)
        return answer

    server, port = await serving("Small", small, max_bytes=16 << 20)
    conn = await RawConnection.open(port, auto_window_update=False)

    try:
        streams = [
            conn.request(f"/{SERVICE}/Small", grpc_frame(b"%04d" % i), flush=False)
            for i in range(3000)
        ]
        conn.flush()
        await conn.until(lambda: False, 1.0)
        through = 65_535 // len(grpc_frame(answer))  # what the connection's window let out
        assert through + HELD_ANSWERS < len(ran) <= through + HELD_ANSWERS + 64, len(ran)
        await read_giving_windows_back(conn, streams)
        assert [(conn.answers[s].outcome, conn.answers[s].data) for s in streams] == [
            ((b"0", b""), grpc_frame(answer))
        ] * 3000
        assert ran == [b"%04d" % i for i in range(3000)]
        assert (server.active, conn.goaways, conn.eof) == (0, [], False)
    finally:
        conn.close()
        await server.stop(None)


# ------------------------------------------------------------------ compression


@pytest.mark.parametrize("algorithm", [grpc.Compression.Gzip, grpc.Compression.Deflate])
async def test_compressed_requests_are_served(served: Any, algorithm: grpc.Compression) -> None:
    """A call compressed by grpc-core (per call, or by the channel's default, as grpc-js's
    ``grpc.default_compression_algorithm`` does) is decompressed and served."""
    server, _h, channel, _ = served
    payload = b"z" * 5000
    assert await unary(channel, "Echo")(payload, timeout=5, compression=algorithm) == payload
    port = server._sockets[0].getsockname()[1]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", compression=algorithm) as compressed:
        assert await unary(compressed, "Echo")(payload, timeout=5) == payload


async def test_compression_is_answered_as_grpc_core_answers_it() -> None:
    """gzip and deflate messages are decompressed (a message whose flag says uncompressed is
    taken as it is), at most ``max_message_bytes`` out of each; the answer is not compressed
    and its ordinary headers offer ``grpc-accept-encoding``; every refusal is grpc-core's
    status and message, Trailers-Only (which carries no ``grpc-accept-encoding``)."""
    server, port = await serving("Hold", hold)
    conn = await RawConnection.open(port)
    try:

        def call(body: bytes, encoding: bytes | None = None) -> int:
            headers = [(b"grpc-encoding", encoding)] if encoding else []
            return conn.request(f"/{SERVICE}/Echo", body, headers=headers)

        gzipped = call(grpc_frame(gzip.compress(b"g" * 1000), True), b"gzip")
        expected = {
            gzipped: (b"0", b""),
            call(grpc_frame(zlib.compress(b"d"), True), b"deflate"): (b"0", b""),
            call(grpc_frame(b"plain"), b"gzip"): (b"0", b""),
            call(grpc_frame(gzip.compress(b"0" * MAX_BYTES), True), b"gzip"): (b"0", b""),
            call(grpc_frame(b"x", True)): (
                b"13",
                b"Compression bit set but no encoding configured",
            ),
            call(grpc_frame(b"x", True), b"identity"): (
                b"13",
                b"Compression bit set but no encoding configured",
            ),
            call(grpc_frame(b"not gzip", True), b"gzip"): (
                b"13",
                b"Decompression failed due to zlib error",
            ),
            call(grpc_frame(gzip.compress(b"0" * (MAX_BYTES + 1)), True), b"gzip"): (
                b"8",
                b"Decompressed message larger than max",
            ),
            call(grpc_frame(b"x"), b"snappy"): (b"13", b"Error parsing 'grpc-encoding' metadata"),
        }
        assert await conn.until(conn.answered, 5)
        assert {s: conn.answers[s].outcome for s in expected} == expected
        answer = conn.answers[gzipped]
        assert answer.headers == [
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-accept-encoding", b"identity, deflate, gzip"),
        ]
        assert answer.data == grpc_frame(b"g" * 1000)  # answered uncompressed
        refused = conn.answers[max(expected)]
        assert [name for name, _ in refused.headers] == [
            b":status",
            b"content-type",
            b"grpc-status",
            b"grpc-message",
        ]
        assert server.active == 0
    finally:
        conn.close()
        await server.stop(None)


async def test_a_disabled_compression_algorithm_is_unimplemented() -> None:
    """``grpc.compression_enabled_algorithms_bitset`` without gzip: a gzip call is
    UNIMPLEMENTED, as grpc-core answers it, and gzip is not offered."""
    server, port = await serving(
        "Hold", hold, options=GrpcOptions(compression_enabled_algorithms_bitset=0b011)
    )
    conn = await RawConnection.open(port)
    try:
        path = f"/{SERVICE}/Echo"
        gzipped = conn.request(path, grpc_frame(b"x"), headers=[(b"grpc-encoding", b"gzip")])
        deflated = conn.request(
            path, grpc_frame(zlib.compress(b"d"), True), headers=[(b"grpc-encoding", b"deflate")]
        )
        assert await conn.until(conn.answered, 5)
        assert conn.answers[gzipped].outcome == (
            b"12",
            b"Compression algorithm 'gzip' is disabled.",
        )
        assert conn.answers[deflated].outcome == (b"0", b"")
        assert dict(conn.answers[deflated].headers)[b"grpc-accept-encoding"] == b"identity, deflate"
    finally:
        conn.close()
        await server.stop(None)


# ------------------------------------------------------------------ request metadata


async def test_metadata_over_the_announced_limit_refuses_that_call_alone(served: Any) -> None:
    """A call whose metadata is over the 16 KiB announced gets RESOURCE_EXHAUSTED with
    grpc-core's message; a call in flight on the same connection lives on and the connection
    serves the next call. (80 KB ended the whole connection before; 20 KB was served.)"""
    _server, h, channel, _ = served
    waiting = unary(channel, "Wait")(b"", timeout=10)
    await asyncio.wait_for(h.started.wait(), 5)
    one_big = (("big", "v" * 20_000),)
    assert await status_of(unary(channel, "Echo")(b"", metadata=one_big, timeout=5)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "received metadata size exceeds hard limit (value length 20000 vs. 16384)",
    )
    many = tuple((f"m{i}", "v" * 16_000) for i in range(5))
    code, details = await status_of(unary(channel, "Echo")(b"", metadata=many, timeout=5))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("received metadata size exceeds hard limit (")
    assert details.endswith(" m0:16034B"), details  # as grpc-core: up to the field past it
    h.release.set()
    assert await waiting == b"released"
    assert await unary(channel, "Echo")(b"after", timeout=5) == b"after"


async def test_the_announced_header_list_size_is_enforced_exactly() -> None:
    """SETTINGS_MAX_HEADER_LIST_SIZE says 16384: a header list of exactly that is served, one
    byte more is refused, with the fields' sizes in the message as grpc-core gives them."""
    server, port = await serving("Hold", hold)
    conn = await RawConnection.open(port)
    try:
        assert conn.settings[0x6] == 16384
        path = f"/{SERVICE}/Echo"
        base = header_list_size(conn.base_headers(path))

        def padded(total: int) -> int:
            pad = (b"pad", b"v" * (total - base - len(b"pad") - 32))
            return conn.request(path, grpc_frame(b"x"), headers=[pad])

        at_limit, over = padded(16384), padded(16385)
        assert await conn.until(conn.answered, 5)
        assert conn.answers[at_limit].outcome == (b"0", b"")
        assert conn.answers[over].outcome == (  # grpc-core's order of the fields
            b"8",
            b"received metadata size exceeds hard limit (16385 vs. 16384);  "
            + f":path:{5 + len(path) + 32}B :authority:43B :method:43B :scheme:43B "
            f"content-type:60B te:42B pad:{16385 - base}B".encode(),
        )
    finally:
        conn.close()
        await server.stop(None)


async def test_between_the_soft_and_hard_limits_a_share_is_refused() -> None:
    """``grpc.max_metadata_size`` 8 KiB under the 16 KiB hard limit (grpc-core's defaults):
    a 12 KiB header list is refused about half the time, as grpc-core refuses it, with its
    soft-limit message; 8 KiB is always served, over 16 KiB never."""
    server, port = await serving("Hold", hold, options=GrpcOptions(max_metadata_size=8192))
    conn = await RawConnection.open(port)
    try:
        path = f"/{SERVICE}/Echo"
        base = header_list_size(conn.base_headers(path))

        def padded(total: int) -> int:
            pad = (b"pad", b"v" * (total - base - len(b"pad") - 32))
            return conn.request(path, grpc_frame(b"x"), headers=[pad])

        calls = {total: [padded(total) for _ in range(60)] for total in (8192, 12288, 16385)}
        assert await conn.until(conn.answered, 10)
        outcomes = {total: {conn.answers[s].status for s in ids} for total, ids in calls.items()}
        assert outcomes == {8192: {b"0"}, 12288: {b"0", b"8"}, 16385: {b"8"}}
        refused = [conn.answers[s].message for s in calls[12288] if conn.answers[s].status == b"8"]
        assert all(
            m.startswith(b"received metadata size exceeds soft limit (12288 vs. 8192);  ")
            for m in refused
        )
    finally:
        conn.close()
        await server.stop(None)


# ------------------------------------------------------------------ flow control and memory


async def sink_server(**options: Any) -> tuple[H2GrpcServer, int, asyncio.Queue[bytes]]:
    """A server whose ``Sink`` handler reads a client stream only when told (one message per
    item put in the returned queue's partner); ``Echo`` echoes."""
    taken: asyncio.Queue[bytes] = asyncio.Queue()
    turns: asyncio.Queue[None] = asyncio.Queue()

    async def sink(requests: AsyncIterator[bytes], context: Any) -> bytes:
        iterator = requests.__aiter__()
        while True:
            await turns.get()
            try:
                taken.put_nowait(await iterator.__anext__())
            except StopAsyncIteration:
                return b"done"

    server = H2GrpcServer(MAX_BYTES, **options)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Sink": grpc.stream_unary_rpc_method_handler(sink),
                    "Echo": grpc.unary_unary_rpc_method_handler(echo),
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    server.turns = turns  # type: ignore[attr-defined]
    return server, port, taken


async def test_a_stream_holds_no_more_than_its_window_of_unread_requests() -> None:
    """A client stream whose handler does not read: the client can send the 64 KiB window
    announced, no more (no WINDOW_UPDATE for bytes nobody read); each message the handler takes
    lets as much more in."""
    server, port, taken = await sink_server()
    conn = await RawConnection.open(port)
    try:
        assert conn.settings[0x4] == 65_535  # SETTINGS_INITIAL_WINDOW_SIZE
        message = grpc_frame(b"m" * 995)  # 1,000 bytes framed
        total = 200 * len(message)
        stream_id = conn.request(f"/{SERVICE}/Sink", message * 200, end=False)
        await conn.until(lambda: False, 0.5)
        assert total - conn.h2.queued_body_size(stream_id) == 65_535
        turns = server.turns  # type: ignore[attr-defined]
        for _ in range(40):
            turns.put_nowait(None)
        for _ in range(40):
            assert await asyncio.wait_for(taken.get(), 5) == b"m" * 995
        # what was read is given back (nghttp2 sends it once half a window is due)
        await conn.until(lambda: False, 0.5)
        sent = total - conn.h2.queued_body_size(stream_id)
        (conn_on_server,) = server.connections
        (call,) = conn_on_server.calls.values()
        assert (call.received, call.delivered, call.acked) == (sent, 40_000, 40_000)
        assert 65_535 + 40_000 - 32_768 <= sent <= 65_535 + 40_000
        assert call.received - call.delivered <= 65_535
    finally:
        conn.close()
        await server.stop(None)


async def test_a_large_unary_request_comes_through_its_window() -> None:
    """A unary request of the message limit, far over the 64 KiB window: its handler waits for
    it, so its bytes are given back as they arrive; two at once on one connection both come
    through, one after the other (a connection lets one message limit past at a time)."""
    limit = 1 << 20
    server, port = await serving("Hold", hold, max_bytes=limit)
    conn = await RawConnection.open(port)
    try:
        payloads = [bytes([i]) * (limit - 100) for i in (1, 2)]
        calls = [conn.request(f"/{SERVICE}/Echo", grpc_frame(p)) for p in payloads]
        assert await conn.until(conn.answered, 10)
        assert [conn.answers[s].data for s in calls] == [grpc_frame(p) for p in payloads]
        (conn_on_server,) = server.connections
        assert (conn_on_server.windows.reserved, conn_on_server.windows._waiting) == (0, {})
    finally:
        conn.close()
        await server.stop(None)


async def test_a_connection_holds_a_bounded_share_of_requests_never_finished() -> None:
    """Slow loris on one connection: 300 calls each start a message four times the 64 KiB window
    and never finish it. Past their windows the connection lets one message limit of them
    through (in order; the others wait at 64 KiB each), and once it holds a message limit and
    256 windows of requests no handler has read, a call whose request is still arriving is
    refused (and what it held freed); another connection is served meanwhile."""
    limit = 1 << 20
    cap = limit + 256 * 65_535
    server, port = await serving("Hold", hold, max_bytes=limit)
    loris = await RawConnection.open(port)
    other = await RawConnection.open(port)
    try:
        message = grpc_frame(b"s" * (4 * 65_536))
        started = message[: 3 * 65_536]
        calls = [loris.request(f"/{SERVICE}/Echo", started, end=False) for _ in range(300)]
        await loris.until(lambda: False, 1.0)
        (held,) = [c for c in server.connections if c.calls]
        open_calls = list(held.calls.values())
        let_past = (limit + 5) // len(message)  # messages that fit in one message limit
        assert held.windows.reserved == let_past * len(message)
        assert sorted(c.received for c in open_calls) == sorted(
            [65_535] * (len(open_calls) - let_past) + [len(started)] * let_past
        )
        # and each call still arriving its header list and 1 KiB (``ARRIVING_CALL_BYTES``)
        assert held.windows.undelivered == sum(c.received + c.held for c in open_calls)
        assert {c.held for c in open_calls} == {
            header_list_size(RawConnection.base_headers(f"/{SERVICE}/Echo")) + 1024
        }
        assert cap - 65_535 < held.windows.undelivered <= cap
        refused = [loris.answers[s] for s in calls if loris.answers[s].closed]
        assert len(refused) == 300 - len(open_calls) > 0
        assert {a.status for a in refused} == {b"8"}
        assert all(
            a.message.startswith(
                b"Request data this connection sent and no call has read is over the limit ("
            )
            for a in refused
        )
        served = other.request(f"/{SERVICE}/Echo", grpc_frame(b"ok"))
        assert await other.until(lambda: other.answered(served), 5)
        assert other.answers[served].outcome == (b"0", b"")
    finally:
        loris.close()
        other.close()
        await server.stop(None)
