"""The authorization matrix's authentication columns: every row of ``test_security_matrix``
(every RPC and every served Kafka API) sent with a wrong password, an expired token and no
credentials at all, through real authentication — gRPC bearer tokens (the listener requires
authentication: ``GRPC:SASL_PLAINTEXT``) and SASL on the Kafka listener — is refused before
anything is read (gRPC UNAUTHENTICATED; the Kafka connection refused and closed) and changes
nothing; the same rows sent with valid credentials (``User:alice``'s token) are served.

On gRPC no password is ever sent: the "wrong password" column is a token signed by a key the
coordinator does not trust. On the Kafka listener it is SASL/PLAIN with a wrong password; the
expired token is OAUTHBEARER's.
"""

from __future__ import annotations

import struct
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import test_security_matrix as matrix
from jwks import TokenIssuer
from kafka_support import KafkaClient
from serve_support import LoopThread
from test_security_matrix import AUTH_CODES, Column, codes

from coordinator.core.config import parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.principal import KafkaPrincipal, user
from coordinator.server.app import CoordinatorServer, ServeOptions
from coordinator.server.security_config import KafkaEndpoint, OAuthSettings, Security

T = TypeVar("T")
WRONG = KafkaPrincipal("Test", "wrong-password")
EXPIRED = KafkaPrincipal("Test", "expired-token")
COLUMNS = [
    Column("authenticated", user("alice"), True),
    Column("wrong password", WRONG, False),
    Column("expired token", EXPIRED, False),
    Column("anonymous", None, False),
]


class Tokens:
    def __init__(self, directory: Path) -> None:
        self.issuer = TokenIssuer(directory)
        self.stranger = TokenIssuer(directory, "stranger.json")  # keys the server does not trust

    def of(self, principal: KafkaPrincipal | None) -> str | None:
        if principal is None:
            return None
        if principal == WRONG:
            return self.stranger.token("alice")
        if principal == EXPIRED:
            return self.issuer.token("alice", lifetime_s=-120)
        return self.issuer.token(principal.name)


class AuthenticatingCoordinator:
    """The real server in this process with authentication on both listeners (the matrix's
    ``Coordinator``, authenticated for real instead of through the seam)."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens
        self.thread = LoopThread()

        async def start() -> CoordinatorServer:
            runtime = CoordinatorRuntime(
                config=parse_config({}), store=MemoryRecordStore(), clock=ManualClock(0)
            )
            options = ServeOptions(
                listen="127.0.0.1:0",
                clock="manual",
                authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"})),
                security=Security(
                    grpc_protocol="SASL_PLAINTEXT",
                    kafka=(
                        KafkaEndpoint(
                            name="SASL",
                            host="127.0.0.1",
                            port=0,
                            protocol="SASL_PLAINTEXT",
                            mechanisms=("PLAIN", "OAUTHBEARER"),
                        ),
                    ),
                    oauth=OAuthSettings(jwks_file=str(tokens.issuer.path)),
                ),
            )
            server = CoordinatorServer(runtime, options)
            await server.start()
            await server.load()
            return server

        self.server = self.run(start())
        self.grpc_address = self.server.address
        self.kafka_address = self.server.kafka_address

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.thread.run(coro, matrix.TIMEOUT)

    snapshot = matrix.Coordinator.snapshot

    def kafka_client(self, principal: KafkaPrincipal | None) -> KafkaClient:
        """A Kafka connection that authenticates as the column says (PLAIN with a wrong
        password, OAUTHBEARER with a token, or not at all)."""
        client = KafkaClient(self.kafka_address, client_id="matrix")
        if principal is None:
            return client
        mechanism = "PLAIN" if principal == WRONG else "OAUTHBEARER"
        assert _sasl(client, 17, 1, _string(mechanism))[:2] == b"\0\0"
        if principal == WRONG:
            answer = _sasl(client, 36, 1, _bytes(b"\0alice\0wrong"))
            assert struct.unpack_from(">h", answer)[0] == 58, answer
            return client
        token = self.tokens.of(principal)
        answer = _sasl(client, 36, 1, _bytes(f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        if principal == EXPIRED:  # the error challenge, then the failure
            assert b"invalid_token" in answer
            assert struct.unpack_from(">h", _sasl(client, 36, 1, _bytes(b"\x01")))[0] == 58
        else:
            assert struct.unpack_from(">h", answer)[0] == 0, answer
        return client

    def stop(self) -> None:
        self.run(self.server.stop(1.0))
        self.thread.close()


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def _sasl(client: KafkaClient, key: int, version: int, body: bytes) -> bytes:
    """One SASL request by hand; the response body (after the correlation id)."""
    client.correlation_id += 1
    header = struct.pack(">hhih", key, version, client.correlation_id, 6) + b"matrix"
    client.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    return client.read_frame()[4:]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[matrix.World]:
    tokens = Tokens(tmp_path_factory.mktemp("tokens"))

    def metadata(principal: KafkaPrincipal | None) -> list[tuple[str, str]]:
        token = tokens.of(principal)
        return [] if token is None else [("authorization", f"Bearer {token}")]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matrix, "metadata", metadata)
        coordinator = AuthenticatingCoordinator(tokens)
        channel = grpc.insecure_channel(coordinator.grpc_address)
        try:
            yield matrix._set_up(coordinator, channel)  # type: ignore[arg-type]
        finally:
            channel.close()
            coordinator.stop()


@pytest.mark.parametrize("row", matrix.ROWS, ids=lambda r: r.name)
def test_authentication_columns(world: matrix.World, row: matrix.Row) -> None:
    coordinator = world.coordinator
    for column in sorted(COLUMNS, key=lambda c: c.allowed):
        before = coordinator.snapshot()
        where = f"{row.name} as {column.name}"
        if column.allowed:
            answer = row.call(world, column)
            assert not AUTH_CODES.intersection(codes(answer)), where
            continue
        if row.name.startswith("grpc:"):
            with pytest.raises(grpc.RpcError) as refused:
                row.call(world, column)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, where
        else:
            try:
                answer = row.call(world, column)
            except (ConnectionError, OSError):  # refused: the connection closed unanswered
                pass
            else:
                pytest.fail(f"{where}: answered {answer}")
        assert coordinator.snapshot() == before, f"{where}: a refused request changed the state"
