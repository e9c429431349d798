"""Kafka's connection limits on both listeners (``coordinator/server/conn_limits.py``):
``max.connections.per.ip``, ``max.connections.per.ip.overrides`` and ``max.connections`` on the
Kafka listener, ``--max-connections-per-ip``, its overrides and ``--max-connections`` on our gRPC
server. Real sockets on 127.0.0.1: a connection over a limit is closed as it is accepted, before
anything is read, while the connections within it go on being served; a connection that closes
— its client gone, a failed TLS handshake, a handshake or idle timeout — frees its slot."""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import uvloop
from certs import TestCa
from rawh2 import RawConnection, grpc_frame

from coordinator.cli import main
from coordinator.server import conn_limits
from coordinator.server.conn_limits import ConnectionLimits, parse_overrides
from coordinator.server.h2grpc import H2GrpcServer
from coordinator.server.kafka import wire
from coordinator.server.kafka.listener import KafkaListener, KafkaOptions
from coordinator.server.kafka.security import ListenerSecurity
from coordinator.server.tls import ServerTls, TlsFiles

SERVICE = "test.Echo"
Refusals = list[tuple[str, str, str]]


# ---------------------------------------------------------------- the settings


def no_dns(host: str) -> list[str]:
    assert host == "clients.example", host
    return ["10.0.0.7", "10.0.0.8"]


def test_the_limits_by_their_kafka_names() -> None:
    assert ConnectionLimits.from_settings({}) == ConnectionLimits()
    assert not ConnectionLimits().limited
    limits = ConnectionLimits.from_settings(
        {
            "max.connections.per.ip": "10",
            "max.connections.per.ip.overrides": " 127.0.0.1:3 , ::1:2,clients.example:0",
            "max.connections": "100",
        },
        resolve=lambda host: no_dns(host) if host == "clients.example" else [host],
    )
    assert limits == ConnectionLimits(
        per_ip=10,
        overrides={"127.0.0.1": 3, "::1": 2, "10.0.0.7": 0, "10.0.0.8": 0},
        total=100,
    )
    # the real resolver: an address is taken as it is (an IPv4 client of a dual-stack socket
    # as its IPv4 address), no DNS asked
    assert parse_overrides("::ffff:127.0.0.1:5,[::1]:6,0:0:0:0:0:0:0:1:7") == {
        "127.0.0.1": 5,
        "::1": 7,
    }
    # 0 per IP: only the overrides' addresses are served, as Kafka allows it
    assert ConnectionLimits.from_settings(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:1"}
    ) == ConnectionLimits(per_ip=0, overrides={"127.0.0.1": 1})


OVR = "max.connections.per.ip.overrides"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({OVR: "127.0.0.1"}, f"{OVR}: '127.0.0.1' is not HOST:COUNT"),
        ({OVR: ":5"}, f"{OVR}: ':5' is not HOST:COUNT"),
        ({OVR: "127.0.0.1:x"}, f"{OVR} ('127.0.0.1:x'): 'x' is not a number"),
        ({OVR: "127.0.0.1:-1"}, f"{OVR} ('127.0.0.1:-1') must be 0..2147483647, got -1"),
        ({OVR: "a b:1"}, f"{OVR}: 'a b' is not a host name or IP address"),
        ({"max.connections.per.ip": "-1"}, "max.connections.per.ip must be 0..2147483647, got -1"),
        (
            {"max.connections.per.ip": "2147483648"},
            "max.connections.per.ip must be 0..2147483647, got 2147483648",
        ),
        ({"max.connections": "many"}, "max.connections: 'many' is not a number"),
        ({"max.connections.per.ip": "0"}, f"max.connections.per.ip can be 0 only if {OVR} is set"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_setting(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        ConnectionLimits.from_settings(settings)
    assert str(refused.value) == message


def test_a_host_that_does_not_resolve_is_refused() -> None:
    def fails(host: str) -> list[str]:
        raise ValueError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: no")

    with pytest.raises(ValueError, match="cannot resolve 'nowhere.invalid'"):
        parse_overrides("nowhere.invalid:1", resolve=fails)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--set", "max.connections.per.ip.overrides=127.0.0.1"],
            "max.connections.per.ip.overrides: '127.0.0.1' is not HOST:COUNT",
        ),
        (
            ["--set", "max.connections=x"],
            "invalid value 'x' for 'max.connections': expected an integer (Kafka type INT, "
            "-2147483648..2147483647)",
        ),
        (
            ["--max-connections-per-ip-overrides", "127.0.0.1:1:"],
            "--max-connections-per-ip-overrides ('127.0.0.1:1:'): '' is not a number",
        ),
        (
            ["--max-connections-per-ip", "0"],
            "--max-connections-per-ip can be 0 only if --max-connections-per-ip-overrides is set",
        ),
        (
            ["--max-connections", "2", "--grpc-transport", "grpcio"],
            "--max-connections, --max-connections-per-ip and their overrides need the default "
            "h2 gRPC server without front ends: grpc.aio (--grpc-transport grpcio, "
            "--grpc-processes) has no connection limits",
        ),
    ],
)
def test_serve_refuses_a_bad_limit_at_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["serve", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]
    code = main([*argv, "--kafka-listen", "127.0.0.1:0", *flags])
    assert (code, capsys.readouterr().err) == (
        2 if "need the default" not in message else 1,
        f"kip848 serve: {message}\n",
    )


# ---------------------------------------------------------------- the Kafka listener


def api_versions(correlation_id: int) -> bytes:
    entity = wire.build(
        wire.request_class(18, 3), client_software_name="limits", client_software_version="1"
    )
    payload = wire.request_frame(entity, correlation_id, "limits")
    return struct.pack(">i", len(payload)) + payload


class KafkaClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def versions(self, correlation_id: int) -> int:
        """An ApiVersions answered: its correlation id."""
        self.writer.write(api_versions(correlation_id))
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
        frame = await asyncio.wait_for(self.reader.readexactly(size), 5)
        return int(struct.unpack_from(">i", frame)[0])

    async def closed_at_once(self) -> bool:
        """The listener closed the connection without a word (EOF or reset within 5 s)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


async def kafka_connect(port: int, tls: ssl.SSLContext | None = None) -> KafkaClient:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="localhost" if tls else None
    )
    return KafkaClient(reader, writer)


async def until(done: Callable[[], bool], seconds: float = 5.0) -> bool:
    for _ in range(int(seconds * 100)):  # bounded: every 10 ms for ``seconds``
        if done():
            return True
        await asyncio.sleep(0.01)
    return done()


@pytest.fixture
async def kafka() -> AsyncIterator[Callable[..., Any]]:
    """``start(settings, security=None, **options)``: a Kafka listener on 127.0.0.1:0 with the
    connection limits of ``settings`` (Kafka's names); (listener, port, refusals observed)."""
    listeners: list[KafkaListener] = []

    async def start(
        settings: dict[str, str], security: ListenerSecurity | None = None, **options: Any
    ) -> tuple[KafkaListener, int, Refusals]:
        limits = ConnectionLimits.from_settings(settings)
        listener = KafkaListener(service=None, options=KafkaOptions(limits=limits, **options))  # type: ignore[arg-type]
        refusals: Refusals = []
        listener.quotas.on_refused = lambda *seen: refusals.append(seen)
        listeners.append(listener)
        return listener, await listener.listen("127.0.0.1", 0, security), refusals

    yield start
    for listener in listeners:
        await asyncio.wait_for(listener.close(), 10)


async def test_kafka_past_max_connections_per_ip_is_closed_at_once_and_a_closed_one_frees_its_slot(
    kafka: Any, caplog: pytest.LogCaptureFixture
) -> None:
    listener, port, refusals = await kafka({"max.connections.per.ip": "2"})
    first, second = await kafka_connect(port), await kafka_connect(port)
    assert [await first.versions(1), await second.versions(2)] == [1, 2]
    with caplog.at_level(logging.WARNING, "kip848.server"):
        third = await kafka_connect(port)
        assert await third.closed_at_once()
    assert refusals == [("kafka", "max.connections.per.ip", "127.0.0.1")]
    assert [r.getMessage() for r in caplog.records if "Refused" in r.getMessage()] == [
        "Refused a connection from 127.0.0.1 on the kafka listener: 127.0.0.1 has 2 connections "
        "open (max.connections.per.ip: 2)."
    ]
    # the first two are served on, nothing of the third was read
    assert [await first.versions(3), await second.versions(4)] == [3, 4]
    assert listener.quotas.counts == {"127.0.0.1": 2} and len(listener.connections) == 2
    first.close()
    assert await until(lambda: listener.quotas.counts == {"127.0.0.1": 1})
    fourth = await kafka_connect(port)
    assert await fourth.versions(5) == 5
    for client in (second, third, fourth):
        client.close()
    assert await until(lambda: listener.quotas.counts == {} and listener.quotas.total == 0)


async def test_kafka_an_override_for_an_address_wins_over_the_default(kafka: Any) -> None:
    listener, port, refusals = await kafka(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:3"}
    )
    clients = [await kafka_connect(port) for _ in range(3)]
    assert [await c.versions(i) for i, c in enumerate(clients)] == [0, 1, 2]
    fourth = await kafka_connect(port)
    assert await fourth.closed_at_once()
    assert refusals == [("kafka", "max.connections.per.ip", "127.0.0.1")]
    assert await clients[0].versions(9) == 9
    for client in (*clients, fourth):
        client.close()


async def test_kafka_past_max_connections_is_closed_at_once(kafka: Any) -> None:
    listener, port, refusals = await kafka({"max.connections": "2"})
    first, second = await kafka_connect(port), await kafka_connect(port)
    assert [await first.versions(1), await second.versions(2)] == [1, 2]
    third = await kafka_connect(port)
    assert await third.closed_at_once()
    assert refusals == [("kafka", "max.connections", "127.0.0.1")]
    second.close()
    assert await until(lambda: listener.quotas.total == 1)
    fourth = await kafka_connect(port)
    assert [await first.versions(3), await fourth.versions(4)] == [3, 4]
    for client in (first, third, fourth):
        client.close()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, ssl.SSLContext]:
    """A server certificate for localhost (handshakes time out after 300 ms) and a client
    context that trusts it."""
    ca = TestCa(str(tmp_path_factory.mktemp("limits-ca")))
    server = ca.server()
    files = TlsFiles(certificate=server.cert, key=server.key, handshake_timeout_ms=300)
    client = ssl.create_default_context(cafile=ca.ca_file)
    return files, client


async def test_kafka_a_failed_or_timed_out_tls_handshake_frees_its_slot(
    kafka: Any, tls_files: tuple[TlsFiles, ssl.SSLContext]
) -> None:
    """On a TLS listener a connection is counted from its accept, before its handshake: a
    second one meanwhile is refused; once the handshake fails (a plaintext client) or times out
    (a client that says nothing) the slot is free for a TLS client."""
    files, client_tls = tls_files
    security = ListenerSecurity(name="SSL", protocol="SSL", tls=ServerTls("Kafka SSL", files))
    listener, port, refusals = await kafka({"max.connections.per.ip": "1"}, security)
    for opening in (b"\x00\x00\x00\x10not a tls hello!", b""):
        silent = await kafka_connect(port)  # its handshake under way: it holds the slot
        assert await until(lambda: listener.quotas.total == 1)
        other = await kafka_connect(port)
        assert await other.closed_at_once()
        silent.writer.write(opening)
        assert await silent.closed_at_once()  # failed, or timed out after 300 ms
        assert await until(lambda: listener.quotas.total == 0)
        other.close()
        silent.close()
    assert [r[1] for r in refusals] == ["max.connections.per.ip"] * 2
    served = await kafka_connect(port, client_tls)
    assert await served.versions(7) == 7
    served.close()
    assert await until(lambda: listener.quotas.total == 0)


async def test_kafka_an_idle_connection_closed_frees_its_slot(kafka: Any) -> None:
    listener, port, _ = await kafka({"max.connections.per.ip": "1"}, idle_ms=200)
    idle = await kafka_connect(port)
    assert await idle.closed_at_once()  # connections.max.idle.ms
    assert await until(lambda: listener.quotas.total == 0)
    served = await kafka_connect(port)
    assert await served.versions(1) == 1
    idle.close()
    served.close()


# ---------------------------------------------------------------- our gRPC server


async def echo(request: bytes, context: Any) -> bytes:
    return request


@pytest.fixture
async def grpc_server() -> AsyncIterator[Callable[..., Any]]:
    """``start(flags, tls=None)``: our gRPC server on 127.0.0.1:0 with the limits of ``flags``
    (``--max-connections-per-ip`` ...); (server, port, refusals observed)."""
    servers: list[H2GrpcServer] = []

    async def start(
        flags: dict[str, str], tls: ServerTls | None = None
    ) -> tuple[H2GrpcServer, int, Refusals]:
        from coordinator.cli.serve import GRPC_LIMIT_FLAGS

        limits = ConnectionLimits.from_settings(flags, GRPC_LIMIT_FLAGS)
        server = H2GrpcServer(1 << 16, limits=limits, tls=tls)
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
                )
            ]
        )
        refusals: Refusals = []
        server.quotas.on_refused = lambda *seen: refusals.append(seen)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return server, port, refusals

    yield start
    for server in servers:
        await asyncio.wait_for(server.stop(None), 10)


async def echoed(conn: RawConnection, body: bytes) -> bytes | None:
    stream_id = conn.request(f"/{SERVICE}/Echo", grpc_frame(body))
    assert await conn.until(lambda: conn.answered(stream_id), 5), "no answer"
    answer = conn.answers[stream_id]
    assert answer.status == b"0", answer
    return bytes(answer.data)


async def refused(port: int) -> bool:
    """A connection the server closed before anything was read: no SETTINGS, EOF."""
    conn = await RawConnection.open(port)
    try:
        return conn.eof and not conn.settings
    finally:
        conn.close()


async def test_grpc_past_max_connections_per_ip_is_closed_at_once_and_a_closed_one_frees_its_slot(
    grpc_server: Any,
) -> None:
    server, port, refusals = await grpc_server({"--max-connections-per-ip": "2"})
    first, second = await RawConnection.open(port), await RawConnection.open(port)
    assert [await echoed(first, b"a"), await echoed(second, b"b")] == [
        grpc_frame(b"a"),
        grpc_frame(b"b"),
    ]
    assert await refused(port)
    assert refusals == [("grpc", "max.connections.per.ip", "127.0.0.1")]
    assert await echoed(first, b"c") == grpc_frame(b"c")
    assert server.quotas.counts == {"127.0.0.1": 2} and len(server.connections) == 2
    first.close()
    assert await until(lambda: server.quotas.total == 1)
    third = await RawConnection.open(port)
    assert await echoed(third, b"d") == grpc_frame(b"d")
    for conn in (second, third):
        conn.close()
    assert await until(lambda: server.quotas.total == 0 and server.quotas.counts == {})


async def test_grpc_an_override_and_the_total(grpc_server: Any) -> None:
    server, port, refusals = await grpc_server(
        {
            "--max-connections-per-ip": "1",
            "--max-connections-per-ip-overrides": "127.0.0.1:3",
            "--max-connections": "2",
        }
    )
    conns = [await RawConnection.open(port) for _ in range(2)]
    assert [await echoed(c, b"%d" % i) for i, c in enumerate(conns)] == [
        grpc_frame(b"0"),
        grpc_frame(b"1"),
    ]
    assert await refused(port)  # the override allows 3, the listener 2
    assert refusals == [("grpc", "max.connections", "127.0.0.1")]
    for conn in conns:
        conn.close()
    assert await until(lambda: server.quotas.total == 0)


async def test_grpc_a_failed_tls_handshake_frees_its_slot(
    grpc_server: Any, tls_files: tuple[TlsFiles, ssl.SSLContext]
) -> None:
    files, client_tls = tls_files
    client_tls.set_alpn_protocols(["h2"])
    tls = ServerTls("gRPC", files, alpn=("h2",))
    server, port, refusals = await grpc_server({"--max-connections-per-ip": "1"}, tls)
    plain = await kafka_connect(port)  # not TLS: its handshake fails
    plain.writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert await plain.closed_at_once()
    assert await until(lambda: server.quotas.total == 0)
    plain.close()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_tls, server_hostname="localhost"
    )
    # served: the server's SETTINGS (an HTTP/2 frame of type 4) come over TLS
    head = await asyncio.wait_for(reader.readexactly(9), 5)
    assert head[3] == 4
    assert server.quotas.total == 1 and refusals == []
    writer.close()
    assert await until(lambda: server.quotas.total == 0)


def test_the_refusals_are_logged_at_most_once_a_second(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    monkeypatch.setattr(conn_limits.time, "monotonic", lambda: now[0])
    quotas = conn_limits.ConnectionQuotas(ConnectionLimits(total=0), "grpc")
    with caplog.at_level(logging.WARNING, "kip848.server"):
        for step in (0.0, 0.3, 0.3, 0.5, 2.0):
            now[0] += step
            assert quotas.take(("10.0.0.1", 5000)) is None
    assert [r.getMessage() for r in caplog.records] == [
        "Refused a connection from 10.0.0.1 on the grpc listener: the listener has 0 "
        "connections open (max.connections: 0).",
        "Refused a connection from 10.0.0.1 on the grpc listener: the listener has 0 "
        "connections open (max.connections: 0); 2 more refused since the last line.",
        "Refused a connection from 10.0.0.1 on the grpc listener: the listener has 0 "
        "connections open (max.connections: 0).",
    ]
    assert quotas.refused == 5


def test_on_uvloop_the_server_default_loop_slots_are_freed_likewise(
    tls_files: tuple[TlsFiles, ssl.SSLContext],
) -> None:
    """uvloop (the server's default loop) has its own TLS transport: a plaintext client's failed
    handshake and a TLS client's closed connection free their slots, a refused connection is
    closed at once, on both listeners."""
    files, client_tls = tls_files

    async def scenario() -> None:
        limits = ConnectionLimits(per_ip=1)
        security = ListenerSecurity(name="SSL", protocol="SSL", tls=ServerTls("Kafka SSL", files))
        listener = KafkaListener(service=None, options=KafkaOptions(limits=limits))  # type: ignore[arg-type]
        port = await listener.listen("127.0.0.1", 0, security)
        grpc_tls = ServerTls("gRPC", files, alpn=("h2",))
        server = H2GrpcServer(1 << 16, limits=limits, tls=grpc_tls)
        grpc_port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            for quotas, at in ((listener.quotas, port), (server.quotas, grpc_port)):
                plain = await kafka_connect(at)
                plain.writer.write(b"\x00\x00\x00\x10not a tls hello!")
                assert await plain.closed_at_once()
                assert await until(lambda q=quotas: q.total == 0)  # type: ignore[misc]
                plain.close()
                served = await kafka_connect(at, client_tls)
                assert await until(lambda q=quotas: q.total == 1)  # type: ignore[misc]
                with pytest.raises(ConnectionError):  # closed before its TLS handshake
                    await kafka_connect(at, client_tls)
                other = await kafka_connect(at)
                assert await other.closed_at_once()
                served.close()
                other.close()
                assert await until(lambda q=quotas: q.total == 0)  # type: ignore[misc]
            tls_client = await kafka_connect(port, client_tls)
            assert await tls_client.versions(3) == 3
            tls_client.close()
        finally:
            await listener.close()
            await server.stop(None)

    uvloop.run(scenario())
