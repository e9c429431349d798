"""Our gRPC server (``coordinator/server/h2grpc.py``) and grpc.aio (grpc-core 1.85's server) side by
side, both on 127.0.0.1:0 serving the same raw-bytes methods, sent the same requests by a bare
HTTP/2 client (``tests/rawh2.py``): what gRPC clients do not send (the request's method and
``te``), and what grpc-core's clients show of the answers (statuses and their words). Each test
asserts the answer and that grpc.aio answers the same."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from rawh2 import MAX_CONCURRENT_STREAMS, Answer, RawConnection, grpc_frame

from coordinator.server.grpc_options import GrpcOptions
from coordinator.server.h2grpc import H2GrpcServer

SERVICE = "test.Echo"
MAX_BYTES = 64 * 1024
INTERNAL_ERROR = 0x2
REFUSED_STREAM = 0x7
CANCEL = 0x8
ENHANCE_YOUR_CALM = 0xB
GOAWAY = 0x7  # frame type


async def echo(request: bytes, context: Any) -> bytes:
    return request


async def big(request: bytes, context: Any) -> bytes:
    return b"x" * (MAX_BYTES + 1)


async def count(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for i in range(int(request)):
        yield b"%d" % i


def methods() -> grpc.GenericRpcHandler:
    unary = grpc.unary_unary_rpc_method_handler
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Echo": unary(echo),
            "Big": unary(big),
            "Count": grpc.unary_stream_rpc_method_handler(count),
        },
    )


@pytest.fixture
async def ports() -> AsyncIterator[dict[str, int]]:
    """``{"h2": port, "grpc-core": port}``: the two servers, the same methods."""
    ours = H2GrpcServer(MAX_BYTES)
    core = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", MAX_BYTES),
            ("grpc.max_receive_message_length", MAX_BYTES),
        ]
    )
    found = {}
    for name, server in (("h2", ours), ("grpc-core", core)):
        server.add_generic_rpc_handlers([methods()])
        found[name] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
    try:
        yield found
    finally:
        await ours.stop(None)
        await core.stop(None)


def headers(method: str = "Echo", **changed: bytes | None) -> list[tuple[bytes, bytes]]:
    """A gRPC request's headers, with ``changed`` ones (``None``: left out; ``_`` for ``-``)."""
    fields = {
        ":method": b"POST",
        ":scheme": b"http",
        ":path": f"/{SERVICE}/{method}".encode(),
        ":authority": b"x",
        "content-type": b"application/grpc",
        "te": b"trailers",
    }
    fields.update({name.replace("_", "-"): value for name, value in changed.items()})
    return [(name.encode(), value) for name, value in fields.items() if value is not None]


async def exchange(port: int, fields: list[tuple[bytes, bytes]], body: bytes) -> Answer:
    """One request (its stream ended with ``body``) and what the server sent on its stream."""
    conn = await RawConnection.open(port)
    try:
        stream_id = conn.h2.send_request(fields)
        conn.h2.send_data(stream_id, body, end_stream=True)
        conn.answers[stream_id] = Answer()
        conn.flush()
        assert await conn.until(lambda: conn.answered(stream_id), 5), "no answer"
        return conn.answers[stream_id]
    finally:
        conn.close()


async def both(
    ports: dict[str, int], fields: list[tuple[bytes, bytes]], body: bytes
) -> dict[str, tuple[list[tuple[bytes, bytes]], int | None]]:
    """What each server sent: its response headers (and trailers) and its RST_STREAM code."""
    answers = {name: await exchange(port, fields, body) for name, port in ports.items()}
    return {name: ([*a.headers, *a.trailers], a.reset) for name, a in answers.items()}


@pytest.mark.parametrize(
    "changed",
    [{"te": None}, {":method": b"GET"}, {":method": b"PUT"}],
    ids=["no-te", "GET", "PUT"],
)
async def test_a_request_without_te_trailers_or_not_a_post_is_reset(
    ports: dict[str, int], changed: dict[str, bytes | None]
) -> None:
    """grpc-core takes only a POST with ``te: trailers`` (the spec's request headers): anything
    else is reset (INTERNAL_ERROR) unanswered, its handler never run."""
    answers = await both(ports, headers(**changed), grpc_frame(b"hi"))
    assert answers["h2"] == ([], INTERNAL_ERROR)
    assert answers["grpc-core"] == answers["h2"]
    # and the same request as it should be is served
    for sent, reset in (await both(ports, headers(), grpc_frame(b"hi"))).values():
        assert (dict(sent)[b"grpc-status"], reset) == (b"0", None)


async def test_the_connection_goes_on_after_a_reset_request(ports: dict[str, int]) -> None:
    conn = await RawConnection.open(ports["h2"])
    try:
        bad = conn.h2.send_request(headers(te=None))
        conn.h2.send_data(bad, grpc_frame(b"bad"), end_stream=True)
        conn.answers[bad] = Answer()
        good = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"good"))
        assert await conn.until(lambda: conn.answered(bad, good), 5)
        assert (conn.answers[bad].reset, conn.answers[bad].headers) == (INTERNAL_ERROR, [])
        assert conn.answers[good].data == grpc_frame(b"good")
        assert conn.answers[good].status == b"0"
    finally:
        conn.close()


SERVED = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", b"identity, deflate, gzip"),
    (b"grpc-status", b"0"),
    (b"grpc-message", b""),
]


@pytest.mark.parametrize(
    "content_type",
    [
        b"application/grpc",
        b"application/grpc+proto",
        b"application/grpc+json",
        b"application/grpc; charset=utf-8",
        b"application/grpc;",
    ],
)
async def test_a_grpc_content_type_with_a_format_or_parameters_is_served(
    ports: dict[str, int], content_type: bytes
) -> None:
    """The spec's content types: ``application/grpc``, alone or with ``+`` a message format or
    ``;`` parameters, served by both."""
    answers = await both(ports, headers(content_type=content_type), grpc_frame(b"hi"))
    assert answers["h2"] == (SERVED, None)
    assert answers["grpc-core"] == answers["h2"]


@pytest.mark.parametrize(
    "content_type",
    [b"application/grpcx", b"application/grpc-web", b"application/grp", b"text/plain", None],
)
async def test_a_content_type_that_is_not_grpc_is_refused_415(
    ports: dict[str, int], content_type: bytes | None
) -> None:
    """Any other content type (one that merely begins with ``application/grpc`` too, as
    ``application/grpcx``; none) is not a gRPC request: HTTP 415 and nothing else, the spec's
    answer (grpc-go's and grpc-java's); the handler does not run. grpc-core 1.85 serves them all,
    a difference docs/operations.md lists."""
    answers = await both(ports, headers(content_type=content_type), grpc_frame(b"hi"))
    assert answers["h2"] == ([(b":status", b"415")], None)
    assert answers["grpc-core"] == (SERVED, None)


async def client_status(port: int, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
    """What a grpc-core client (grpc.aio, no size limits of its own) reports of one call."""
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    ) as channel:
        try:
            await channel.unary_unary(f"/{SERVICE}/{method}")(body, timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_message_size_refusals_in_grpc_core_words(ports: dict[str, int]) -> None:
    """What a grpc-core client shows of a message over the server's limit, either way."""
    for port in ports.values():
        assert await client_status(port, "Echo", b"y" * (MAX_BYTES + 1)) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"SERVER: Received message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
        )
        assert await client_status(port, "Big", b"") == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"SERVER: Sent message larger than max ({MAX_BYTES + 1} vs. {MAX_BYTES})",
        )


@pytest.mark.parametrize(
    ("changed", "details"),
    [
        ({"grpc_timeout": b"soon"}, b"Error parsing 'grpc-timeout' metadata"),
        ({"grpc_timeout": b"5"}, b"Error parsing 'grpc-timeout' metadata"),
        ({"x_bin": b"!!!"}, b"Error parsing 'x-bin' metadata: illegal base64 encoding"),
        ({"x_bin": b"AA==AA"}, b"Error parsing 'x-bin' metadata: illegal base64 encoding"),
    ],
    ids=["timeout-word", "timeout-no-unit", "bin-not-base64", "bin-padding-inside"],
)
async def test_unparsable_metadata_in_grpc_core_words(
    ports: dict[str, int], changed: dict[str, bytes], details: bytes
) -> None:
    for name, (sent, _reset) in (await both(ports, headers(**changed), grpc_frame(b"x"))).items():
        fields = dict(sent)
        assert (fields[b"grpc-status"], fields[b"grpc-message"]) == (b"13", details), name


@pytest.mark.parametrize(
    "value", [b"123456789m", b"100000000S", b"1000000000n", b"1000000001S", b"99999999999999H"]
)
async def test_a_grpc_timeout_past_the_specs_eight_digits_is_taken_as_grpc_core_takes_it(
    ports: dict[str, int], value: bytes
) -> None:
    """grpc-core takes ``grpc-timeout`` values up to 10^9, and a larger one as no deadline;
    grpc-js sends ``100000000S`` for a deadline just under 10^8 seconds away
    (tests/e2e/test_grpc_conformance.py). Served, not refused."""
    for name, (sent, reset) in (
        await both(ports, headers(grpc_timeout=value), grpc_frame(b"x"))
    ).items():
        assert (dict(sent)[b"grpc-status"], reset) == (b"0", None), name


@pytest.mark.parametrize(
    ("value", "text"),
    [("é ✓".encode(), "é ✓"), (b"caf\xe9", "café"), (b"plain", "plain")],
    ids=["utf-8", "latin-1", "ascii"],
)
async def test_a_metadata_value_reaches_the_handler_as_grpc_aio_decodes_it(
    value: bytes, text: str
) -> None:
    """grpc.aio hands a handler a metadata value decoded as UTF-8, or as Latin-1 if it is not
    UTF-8; a client id (the ``client-id`` metadata) is shown back by DescribeGroups."""
    seen: dict[str, list[tuple[str, Any]]] = {}

    def recording(name: str) -> grpc.GenericRpcHandler:
        async def meta(request: bytes, context: Any) -> bytes:
            seen[name] = list(context.invocation_metadata())
            return request

        return grpc.method_handlers_generic_handler(
            SERVICE, {"Meta": grpc.unary_unary_rpc_method_handler(meta)}
        )

    servers: list[Any] = [H2GrpcServer(MAX_BYTES), grpc.aio.server()]
    try:
        for name, server in zip(("h2", "grpc-core"), servers, strict=True):
            server.add_generic_rpc_handlers([recording(name)])
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            answer = await exchange(port, headers("Meta", client_id=value), grpc_frame(b""))
            assert answer.status == b"0", name
            assert ("client-id", text) in seen[name], (name, seen[name])
    finally:
        for server in servers:
            await server.stop(None)


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_a_call_whose_request_never_ends_is_answered_once_its_message_is_whole(
    ports: dict[str, int], server: str
) -> None:
    """A unary or server-streaming call runs once its one message has come, whether or not the
    client ends its stream (grpc-core's server does not wait for the END_STREAM; a client that
    never sent it waited here for ever, or for its deadline)."""
    conn = await RawConnection.open(ports[server])
    try:
        unary = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"hi"), end=False)
        stream = conn.request(f"/{SERVICE}/Count", grpc_frame(b"3"), end=False)
        assert await conn.until(lambda: conn.answered(unary, stream), 5)
        assert (conn.answers[unary].outcome, conn.answers[unary].data) == (
            (b"0", b""),
            grpc_frame(b"hi"),
        )
        assert (conn.answers[stream].outcome, conn.answers[stream].data) == (
            (b"0", b""),
            grpc_frame(b"0") + grpc_frame(b"1") + grpc_frame(b"2"),
        )
        # the connection goes on
        after = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"after"))
        assert await conn.until(lambda: conn.answered(after), 5)
        assert conn.answers[after].status == b"0"
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("method", "changed", "details"),
    [
        ("Nope", {"grpc_timeout": b"soon"}, b"Error parsing 'grpc-timeout' metadata"),
        ("Nope", {"x_bin": b"!!"}, b"Error parsing 'x-bin' metadata: illegal base64 encoding"),
        ("Nope", {"grpc_encoding": b"snappy"}, b"Error parsing 'grpc-encoding' metadata"),
        (
            "Echo",
            {"grpc_timeout": b"soon", "x_bin": b"!!"},
            b"Error parsing 'grpc-timeout' metadata",
        ),
        (
            "Echo",
            {"x_bin": b"!!", "grpc_timeout": b"soon"},
            b"Error parsing 'x-bin' metadata: illegal base64 encoding",
        ),
        (
            "Echo",
            {"content_type": b"text/plain", "x_bin": b"!!"},
            b"Error parsing 'x-bin' metadata: illegal base64 encoding",
        ),
    ],
    ids=[
        "timeout+no-method",
        "bin+no-method",
        "encoding+no-method",
        "timeout-first",
        "bin-first",
        "bin+not-grpc",
    ],
)
async def test_a_field_that_does_not_parse_is_refused_before_anything_else(
    ports: dict[str, int], method: str, changed: dict[str, bytes], details: bytes
) -> None:
    """grpc-core refuses a request whose headers do not parse as it parses them: the first such
    field in their order, before it looks for the method or at the content type."""
    for name, (sent, _reset) in (
        await both(ports, headers(method, **changed), grpc_frame(b"x"))
    ).items():
        fields = dict(sent)
        assert (fields.get(b"grpc-status"), fields.get(b"grpc-message")) == (b"13", details), name


async def test_a_request_health_cannot_read_is_invalid_argument_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request message health's own deserializer cannot read (our services read theirs and
    answer INVALID_ARGUMENT): ended INVALID_ARGUMENT with the parser's reason, as our services
    answer, and no error logged. Here we differ from grpc.aio on purpose, which logs an
    unexpected error with its traceback and answers UNKNOWN "Unexpected server error." (before
    the fix, so did ours)."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from coordinator.server.grpc_server import add_health_and_reflection

    ours = H2GrpcServer(MAX_BYTES)
    add_health_and_reflection(ours, health.aio.HealthServicer(), [])
    port = ours.add_insecure_port("127.0.0.1:0")
    await ours.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=None,
                response_deserializer=None,
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await check(b"\xff\xff\xff", timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details() == (
                "Undecodable request: Error parsing message with type "
                "'grpc.health.v1.HealthCheckRequest': Wire format was corrupt"
            )
            # A request it can read is still served.
            stub = health_pb2_grpc.HealthStub(channel)
            answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await ours.stop(None)
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_a_client_that_does_not_read_holds_one_answer_of_each_stream_beyond_its_windows(
    server: str,
) -> None:
    """Server-streaming handlers that produce as fast as they are let, to a client that reads
    its socket but never gives its windows back (64 KiB a stream, 64 KiB in all): each handler
    is held back once its stream's previous answer has not gone through the windows, as
    grpc-core holds a handler's write until its message has: beyond what arrived, each stream
    holds one message, the one its writer waits on. (Before the fix each stream queued 1 MiB
    here: 1,020 messages.)"""
    produced: Counter[int] = Counter()

    async def flood(request: bytes, context: Any) -> AsyncIterator[bytes]:
        while True:
            produced[int(request)] += 1
            yield b"x" * 1024

    served: Any = H2GrpcServer(MAX_BYTES) if server == "h2" else grpc.aio.server()
    served.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE, {"Flood": grpc.unary_stream_rpc_method_handler(flood)}
            )
        ]
    )
    port = served.add_insecure_port("127.0.0.1:0")
    await served.start()
    conn = await RawConnection.open(port, auto_window_update=False)
    try:
        streams = [conn.request(f"/{SERVICE}/Flood", grpc_frame(b"%d" % i)) for i in range(8)]
        seen: dict[int, int] | None = None
        while seen != produced:  # until no handler gets further
            seen = dict(produced)
            await conn.until(lambda: False, 0.5)
        arrived = [len(conn.answers[s].data) // len(grpc_frame(b"x" * 1024)) for s in streams]
        assert sum(len(conn.answers[s].data) for s in streams) <= 65_535  # what the windows let
        held = [produced[i] - arrived[i] for i in range(8)]
        assert held == [1] * 8, (held, arrived)
        assert not any(conn.answers[s].closed for s in streams)
    finally:
        conn.close()
        await served.stop(None)


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_a_stream_over_the_acknowledged_limit_is_refused_alone(server: str) -> None:
    """``grpc.max_concurrent_streams`` 2, announced and acknowledged; a client that opens a
    third stream while two are open gets that stream refused (RST_STREAM REFUSED_STREAM, which
    clients retry), as grpc-core refuses it, and the connection goes on: the two calls are
    answered and a call started once they are done is served. (Before the fix our server ended
    the connection: libnghttp2's GOAWAY PROTOCOL_ERROR, the two calls lost.)"""
    served: Any = (
        H2GrpcServer(MAX_BYTES, options=GrpcOptions(max_concurrent_streams=2))
        if server == "h2"
        else grpc.aio.server(options=[("grpc.max_concurrent_streams", 2)])
    )
    served.add_generic_rpc_handlers([methods()])
    port = served.add_insecure_port("127.0.0.1:0")
    await served.start()
    conn = await RawConnection.open(port, obey_stream_limit=False)
    try:
        assert conn.settings[MAX_CONCURRENT_STREAMS] == 2
        first, second = (conn.request(f"/{SERVICE}/Echo", None, end=False) for _ in range(2))
        third = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"third"))
        assert await conn.until(lambda: conn.answered(third), 5)
        assert (conn.answers[third].reset, conn.answers[third].headers) == (REFUSED_STREAM, [])
        conn.send(first, grpc_frame(b"first"), end=True)
        conn.send(second, grpc_frame(b"second"), end=True)
        assert await conn.until(lambda: conn.answered(first, second), 5)
        later = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"later"))
        assert await conn.until(lambda: conn.answered(later), 5)
        for stream_id, body in ((first, b"first"), (second, b"second"), (later, b"later")):
            answer = conn.answers[stream_id]
            assert (answer.outcome, answer.data, answer.reset) == (
                (b"0", b""),
                grpc_frame(body),
                None,
            )
        assert (conn.goaways, conn.eof) == ([], False)
    finally:
        conn.close()
        await served.stop(None)


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_streams_past_the_limit_before_it_is_acknowledged_are_reset_enhance_your_calm(
    server: str,
) -> None:
    """Five calls sent with the client's preface, before it has read the server's SETTINGS
    (``grpc.max_concurrent_streams`` 2): grpc-core takes the limit's number of streams before
    the acknowledgement and resets the others ENHANCE_YOUR_CALM; the connection goes on."""
    served: Any = (
        H2GrpcServer(MAX_BYTES, options=GrpcOptions(max_concurrent_streams=2))
        if server == "h2"
        else grpc.aio.server(options=[("grpc.max_concurrent_streams", 2)])
    )
    served.add_generic_rpc_handlers([methods()])
    port = served.add_insecure_port("127.0.0.1:0")
    await served.start()
    conn = await RawConnection.open(port, obey_stream_limit=False, read_settings=False)
    try:
        calls = [conn.request(f"/{SERVICE}/Echo", grpc_frame(b"%d" % i)) for i in range(5)]
        assert await conn.until(lambda: conn.answered(*calls), 5)
        assert [(conn.answers[c].outcome, conn.answers[c].reset) for c in calls] == [
            ((b"0", b""), None),
            ((b"0", b""), None),
            *[((None, b""), ENHANCE_YOUR_CALM)] * 3,
        ]
        assert conn.settings[MAX_CONCURRENT_STREAMS] == 2
        later = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"later"))
        assert await conn.until(lambda: conn.answered(later), 5)
        assert conn.answers[later].outcome == (b"0", b"")
        assert (conn.goaways, conn.eof) == ([], False)
    finally:
        conn.close()
        await served.stop(None)


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_many_streams_reset_by_the_client_do_not_end_its_connection(
    ports: dict[str, int], server: str
) -> None:
    """3,000 calls opened and reset (CANCEL) by the client, 500 at a time, as a client whose
    calls all pass their deadline together does: grpc-core ends no connection for RST_STREAMs
    (its defences against "rapid reset" floods bound the work a read may start instead), so
    neither do we, and the next call on the connection is served (once grpc.aio is through
    the cancellations: a call that comes meanwhile it may answer CANCELLED). (Before,
    libnghttp2's limit, 1,000 RST_STREAMs at once then 33 a second, ended the connection with
    GOAWAY.)"""
    conn = await RawConnection.open(ports[server])
    try:
        for _ in range(6):
            streams = [
                conn.request(f"/{SERVICE}/Echo", grpc_frame(b"x"), flush=False) for _ in range(500)
            ]
            conn.flush()
            for stream_id in streams:
                conn.h2.reset_stream(stream_id, CANCEL)
            conn.flush()
            await conn.until(lambda: False, 0.01)
        await conn.until(lambda: False, 0.5)
        after = conn.request(f"/{SERVICE}/Echo", grpc_frame(b"after"))
        assert await conn.until(lambda: conn.answered(after), 10)
        assert (conn.answers[after].outcome, conn.answers[after].data) == (
            (b"0", b""),
            grpc_frame(b"after"),
        )
        assert (conn.goaways, conn.eof) == ([], False)
    finally:
        conn.close()


def frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """The HTTP/2 frames in ``data``: (type, stream id, payload)."""
    out, pos = [], 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFF_FFFF
        out.append((data[pos + 3], stream_id, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


@pytest.mark.parametrize("server", ["h2", "grpc-core"])
async def test_a_client_that_never_sends_its_settings_is_told_so_and_dropped(server: str) -> None:
    """grpc-core's handshake timeout (``grpc.server_handshake_timeout_ms``, 120 s; 1 s here): a
    connection that sends nothing, or its preface without the SETTINGS that end it, gets GOAWAY
    INTERNAL_ERROR (last stream 0) "Did not receive HTTP/2 settings before handshake timeout"
    and is closed; one that sent its SETTINGS stays, and its call is served after. (Before, our
    server kept a connection that said nothing for ever.)"""
    served: Any
    if server == "h2":
        served = H2GrpcServer(MAX_BYTES)
        served.handshake_timeout_s = 1.0
    else:
        served = grpc.aio.server(options=[("grpc.server_handshake_timeout_ms", 1000)])
    served.add_generic_rpc_handlers([methods()])
    port = served.add_insecure_port("127.0.0.1:0")
    await served.start()
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    async def silent(sent: bytes) -> tuple[list[tuple[int, int, bytes]], float]:
        """What the server sent until it closed the connection, and when it did."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        started, data = time.monotonic(), b""
        try:
            while chunk := await asyncio.wait_for(reader.read(1 << 16), 5):
                data += chunk
        finally:
            writer.close()
        return frames(data), time.monotonic() - started

    talking = await RawConnection.open(port)
    try:
        for sent in (b"", preface):
            got, after = await silent(sent)
            goaway = [(stream_id, payload) for kind, stream_id, payload in got if kind == GOAWAY]
            assert goaway == [
                (
                    0,
                    (0).to_bytes(4, "big")
                    + INTERNAL_ERROR.to_bytes(4, "big")
                    + b"Did not receive HTTP/2 settings before handshake timeout",
                )
            ]
            assert 0.9 < after < 3.0, after
        call = talking.request(f"/{SERVICE}/Echo", grpc_frame(b"still"))
        assert await talking.until(lambda: talking.answered(call), 5)
        assert (talking.answers[call].outcome, talking.goaways, talking.eof) == (
            (b"0", b""),
            [],
            False,
        )
    finally:
        talking.close()
        await served.stop(None)
