"""SASL/PLAIN on the Kafka listener checks a password by deriving it as SCRAM stores it
(PBKDF2, 4,096 to 16,384 iterations per stored mechanism: 1-7 ms each here). That runs on a
thread, not on the event loop that serves every group: a stream of sign-in attempts (a known
user's name, guessed passwords, on as many connections as a client opens) must not hold back
the other connections' requests. The connection itself reads nothing more until its attempt
is decided, as Kafka's authenticator takes one SASL message of a connection at a time."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.core.errors import ErrorCode
from coordinator.security import scram
from coordinator.server.kafka import wire
from coordinator.server.kafka.listener import KafkaListener
from coordinator.server.kafka.sasl import Authenticator
from coordinator.server.kafka.security import ListenerSecurity

SLOW_S = 0.5
"""How long each password derivation takes in these tests (made slow on purpose)."""
PROMPT_S = 0.25
"""Another connection's ApiVersions is answered within this while a derivation runs."""
CREDENTIALS = {
    mechanism: scram.credential_from_password(mechanism, "alice-secret", b"salt" * 4, 4096)
    for mechanism in scram.ScramMechanism
}


@pytest.fixture
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    """A SASL_PLAINTEXT listener offering PLAIN for user alice (both SCRAM mechanisms stored),
    whose password derivations each take :data:`SLOW_S`."""
    derive = scram.credential_from_password

    def slow(*args: Any) -> scram.ScramCredential:
        time.sleep(SLOW_S)  # blocks whichever thread runs it
        return derive(*args)

    monkeypatch.setattr(scram, "credential_from_password", slow)

    def lookup(name: str, mechanism: scram.ScramMechanism) -> scram.ScramCredential | None:
        return CREDENTIALS[mechanism] if name == "alice" else None

    service: Any = SimpleNamespace(authorizer=SimpleNamespace(open=True, ready=True))
    listener = KafkaListener(service)
    authenticator = Authenticator(mechanisms=("PLAIN",), lookup=lookup)
    security = ListenerSecurity(
        name="SASL_PLAINTEXT",
        protocol="SASL_PLAINTEXT",
        mechanisms=("PLAIN",),
        authenticator=authenticator,
    )
    bound = await listener.listen("127.0.0.1", 0, security)
    try:
        yield bound
    finally:
        await listener.close()


def frame(key: int, version: int, correlation_id: int, **values: Any) -> bytes:
    body = wire.request_frame(
        wire.build(wire.request_class(key, version), values), correlation_id, "t"
    )
    return struct.pack(">i", len(body)) + body


async def answer(reader: asyncio.StreamReader, key: int, version: int) -> tuple[int, Any]:
    """The next answer on the connection: (correlation id, the decoded response)."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    data = await reader.readexactly(size)
    flexible = wire.response_header_flexible(key, version)
    return struct.unpack(">i", data[:4])[0], wire.decode_response(
        key, version, data, 4 + (1 if flexible else 0)
    )


async def signing_in(port: int, password: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that shook hands for PLAIN and sent alice's SaslAuthenticate."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame(17, 1, 1, mechanism="PLAIN"))
    assert (await answer(reader, 17, 1))[1].error_code == ErrorCode.NONE
    writer.write(frame(36, 2, 2, auth_bytes=f"\0alice\0{password}".encode()))
    return reader, writer


def api_versions_waited(port: int) -> float:
    """On a thread of its own (the loop may be held): once alice's derivation has begun, how
    long a new connection waits for the answer to its ApiVersions."""
    time.sleep(0.1)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        started = time.monotonic()
        conn.sendall(frame(18, 3, 9, client_software_name="t", client_software_version="1"))
        size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
        data = conn.recv(size, socket.MSG_WAITALL)
        waited = time.monotonic() - started
    assert struct.unpack(">i", data[:4])[0] == 9
    assert wire.decode_response(18, 3, data, 4).error_code == ErrorCode.NONE
    return waited


async def test_other_connections_are_served_while_a_password_is_derived(port: int) -> None:
    """While alice's password is derived (two mechanisms: 2 × SLOW_S), another connection's
    ApiVersions is answered at once; alice's connection holds the request it sent behind its
    SaslAuthenticate (an ApiVersions, pipelined) and serves it once signed in, in order.
    Before, the derivation ran on the loop: the other connection waited for it (0.9 s)."""
    reader, writer = await signing_in(port, "alice-secret")
    writer.write(frame(18, 3, 3, client_software_name="t", client_software_version="1"))
    waited = await asyncio.to_thread(api_versions_waited, port)
    assert waited < PROMPT_S, f"another connection waited {waited:.2f} s for a derivation"
    signed_in = await answer(reader, 36, 2)
    assert signed_in[0] == 2
    assert (signed_in[1].error_code, signed_in[1].error_message) == (ErrorCode.NONE, None)
    after = await answer(reader, 18, 3)
    assert (after[0], after[1].error_code) == (3, ErrorCode.NONE)
    writer.close()


async def test_a_wrong_password_is_refused_after_its_derivation_and_the_connection_closed(
    port: int,
) -> None:
    reader, writer = await signing_in(port, "guessed")
    refused = await answer(reader, 36, 2)
    assert refused[0] == 2
    assert (refused[1].error_code, refused[1].error_message) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "Authentication failed: Invalid username or password",
    )
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
    writer.close()
