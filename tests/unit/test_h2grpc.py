"""Our gRPC server on libnghttp2 (``coordinator/server/h2grpc.py``) answers grpc-core clients as
grpc-core's server does: statuses and messages, deadlines, size limits, compression refused,
cancellation, the concurrency limit, server streams with flow control, health and reflection
(bidirectional), and a graceful stop. Driven by grpc.aio clients on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from coordinator.server.forwarding import add_health_and_reflection
from coordinator.server.h2grpc import H2GrpcServer, format_peer, parse_timeout

SERVICE = "test.Echo"
MAX_BYTES = 64 * 1024


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
        f"Received message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
    )
    assert await status_of(unary(channel, "Big")(b"", timeout=5)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"Sent message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
    )
    # the connection still serves
    assert await unary(channel, "Echo")(b"after", timeout=5) == b"after"


async def test_compressed_requests_are_refused(served: Any) -> None:
    _server, _h, channel, _ = served
    call = unary(channel, "Echo")(b"z" * 1000, timeout=5, compression=grpc.Compression.Gzip)
    code, details = await status_of(call)
    assert code == grpc.StatusCode.UNIMPLEMENTED
    assert details.startswith("Compressed messages are not supported")


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
    once the client's window, the socket's buffers and our 1 MiB high-water mark are full;
    every message arrives, in order. The client's window is kept at its initial size (no
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
    # held back: measured 24 messages ahead (1.2 MB), one more for each message the client
    # reads, none while it sleeps
    assert max(ahead) < 100 and max(ahead) - min(ahead) <= 8, ahead
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
    assert parse_timeout(b"123456789S") is None  # more than 8 digits
    assert parse_timeout(b"10x") is None
    assert parse_timeout(b"S") is None
    assert format_peer(("127.0.0.1", 5)) == "ipv4:127.0.0.1:5"
    assert format_peer(("::ffff:10.0.0.1", 6, 0, 0)) == "ipv4:10.0.0.1:6"
    assert format_peer(("::1", 7, 0, 0)) == "ipv6:[::1]:7"


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
    """One request from a bare HTTP/2 client (ngh2): the response's headers and trailers
    merged, and its body. ``trailers``: the request ends with them, not with its last DATA."""
    from ngh2 import (
        Connection,
        DataReceived,
        ResponseReceived,
        Role,
        StreamClosed,
        TrailersReceived,
    )

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    h2 = Connection(Role.CLIENT)
    h2.initiate_connection()
    base = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/test.Echo/Echo")]
    stream_id = h2.send_request(
        [*base, (b":authority", b"x"), *headers], end_stream=not body and trailers is None
    )
    if body:
        h2.send_data(stream_id, body, end_stream=trailers is None)
    if trailers is not None:
        h2.send_trailers(stream_id, trailers)
    writer.write(h2.data_to_send())
    answer: dict[bytes, bytes] = {}
    data = b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            assert chunk, "connection closed before the answer"
            h2.receive_data(chunk)
            for event in h2.events():
                if isinstance(event, ResponseReceived | TrailersReceived):
                    answer.update(dict(event.headers))
                elif isinstance(event, DataReceived):
                    data += event.data
                elif isinstance(event, StreamClosed):
                    return answer, data
            writer.write(h2.data_to_send())
    finally:
        writer.close()


def grpc_frame(payload: bytes) -> bytes:
    return b"\0" + len(payload).to_bytes(4, "big") + payload


async def test_what_grpc_clients_never_send_is_refused_clearly(served: Any) -> None:
    server, _h, _channel, _ = served
    port = server._sockets[0].getsockname()[1]
    grpc_type = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]
    # not gRPC at all
    answer, _ = await raw_exchange(port, [(b"content-type", b"text/plain")], b"hi")
    assert answer[b":status"] == b"415"
    # a malformed deadline
    answer, _ = await raw_exchange(port, [*grpc_type, (b"grpc-timeout", b"soon")], grpc_frame(b"x"))
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (
        b"13",
        b"Invalid grpc-timeout header",
    )
    # binary metadata that is not base64
    answer, _ = await raw_exchange(port, [*grpc_type, (b"x-bin", b"!!!")], grpc_frame(b"x"))
    assert (answer[b"grpc-status"], answer[b"grpc-message"]) == (b"13", b"Invalid base64 in x-bin")
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


class RawCalls:
    """Unary calls written by a bare HTTP/2 client (ngh2) on one connection, all at once:
    :meth:`send` writes them, :meth:`statuses` reads until every one has ended."""

    def __init__(self, reader: Any, writer: Any, h2: Any) -> None:
        self.reader, self.writer, self.h2 = reader, writer, h2

    @classmethod
    async def open(cls, port: int, method: str, payloads: list[bytes]) -> RawCalls:
        from ngh2 import Connection, Role

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        h2 = Connection(Role.CLIENT)
        h2.initiate_connection()
        writer.write(h2.data_to_send())
        h2.receive_data(await asyncio.wait_for(reader.read(65536), 10))  # the server's SETTINGS
        h2.events()  # (until then nghttp2 sends at most 100 streams)
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", f"/{SERVICE}/{method}".encode()),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        for p in payloads:
            stream_id = h2.send_request(headers)
            h2.send_data(stream_id, grpc_frame(p), end_stream=True)
        return cls(reader, writer, h2)

    def send(self) -> None:
        self.writer.write(self.h2.data_to_send())

    async def statuses(self, calls: int) -> list[bytes]:
        """The grpc-status of each of ``calls`` calls, in the order they ended."""
        from ngh2 import ResponseReceived, StreamClosed, TrailersReceived

        status: dict[int, bytes] = {}
        ended: list[bytes] = []
        while len(ended) < calls:
            chunk = await asyncio.wait_for(self.reader.read(65536), 10)
            assert chunk, f"connection closed after {len(ended)} of {calls} answers"
            self.h2.receive_data(chunk)
            for e in self.h2.events():
                if isinstance(e, ResponseReceived | TrailersReceived):
                    code = dict(e.headers).get(b"grpc-status")
                    if code is not None:
                        status[e.stream_id] = code
                elif isinstance(e, StreamClosed):
                    ended.append(status.get(e.stream_id, b"none"))
            self.writer.write(self.h2.data_to_send())
        self.writer.close()
        return ended


async def serving(method: str, handler: Callable[[bytes, Any], Any]) -> tuple[H2GrpcServer, int]:
    """A server on 127.0.0.1:0 with one unary method of ``test.Echo``, and its port."""
    server = H2GrpcServer(MAX_BYTES)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE, {method: grpc.unary_unary_rpc_method_handler(handler)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


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
