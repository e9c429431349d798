"""SASL on the Kafka listener of a real ``kip848 serve`` (docs/security.md, "Authentication"),
with real clients: confluent-kafka (librdkafka) over SASL_SSL with SCRAM-SHA-512 and with
OAUTHBEARER, kafka-python over SASL_PLAINTEXT with PLAIN; and raw requests for what clients
never send (requests before authentication, unknown mechanisms, SaslAuthenticate without a
handshake, an expired session, 1 MB tokens), each refused with its Kafka error and the
connection closed, while other connections are served."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import grpc
import pytest
from certs import Pem, TestCa
from conftest import ServerProcess
from jwks import TokenIssuer

from coordinator.security import scram
from kip848.v1 import admin_pb2, admin_pb2_grpc

SALT = b"kip848-test-salt"


def add_user(channel: grpc.Channel, name: str, password: str) -> None:
    """A SCRAM user for both mechanisms, salted here (AlterUserScramCredentials)."""
    for mechanism in scram.ScramMechanism:  # one alteration per user and request
        upsert = admin_pb2.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=name,
            mechanism=int(mechanism),
            iterations=4096,
            salt=SALT,
            salted_password=scram.salted_password(mechanism, password, SALT, 4096),
        )
        reply = admin_pb2_grpc.AdminServiceStub(channel).AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(upsertions=[upsert]), timeout=10
        )
        assert [r.error_code for r in reply.results] == [0], reply


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCa, Pem]:
    ca = TestCa(str(tmp_path_factory.mktemp("pki")))
    return ca, ca.server()


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> TokenIssuer:
    return TokenIssuer(tmp_path_factory.mktemp("jwks"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, pki: tuple[TestCa, Pem], issuer: TokenIssuer
) -> ServerProcess:
    """Kafka listeners SASL_SSL (SCRAM, OAUTHBEARER), SASL_PLAINTEXT (PLAIN, SCRAM; sessions
    of 2 s) and SASL_PLAINTEXT (PLAIN; sessions without an end), and gRPC (PLAINTEXT) for the
    tests' own set-up."""
    ca, server_pem = pki
    proc = ServerProcess(
        tmp_path_factory.mktemp("sasl") / "d",
        "--set",
        "listeners=SECURE://127.0.0.1:0,PLAIN://127.0.0.1:0,BARE://127.0.0.1:0",
        "--set",
        f"listener.name.secure.ssl.keystore.location={server_pem.both}",
        "--set",
        "listener.security.protocol.map=SECURE:SASL_SSL,PLAIN:SASL_PLAINTEXT,"
        "BARE:SASL_PLAINTEXT,GRPC:PLAINTEXT",
        "--set",
        "listener.name.secure.sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER",
        "--set",
        "listener.name.plain.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        "--set",
        "listener.name.plain.connections.max.reauth.ms=2000",
        "--set",
        "listener.name.bare.sasl.enabled.mechanisms=PLAIN",
        "--set",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{issuer.path}",
        "--metrics-listen",
        "127.0.0.1:0",
        clock="system",
        lines=5,
    )
    add_user(proc.channel, "alice", "alice-secret")
    add_user(proc.channel, "bob", "bob-secret")
    proc.create_topic("sasl-topic", 2)
    yield proc
    assert proc.stop() == 0


def kafka_address(server: ServerProcess, index: int) -> str:
    line = server.lines[1 + index]
    return line.rpartition(" ")[2]


def _consume_once(config: dict[str, object], group: str) -> list[int]:
    """A confluent-kafka consumer joins ``group`` (classic protocol), commits an offset and
    reads it back; returns the partitions it was given."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    try:
        consumer.subscribe(["sasl-topic"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        assigned = sorted(tp.partition for tp in consumer.assignment())
        consumer.commit(offsets=[TopicPartition("sasl-topic", 0, 11)], asynchronous=False)
        committed = consumer.committed([TopicPartition("sasl-topic", 0)], timeout=10)
        assert committed[0].offset == 11
        return assigned
    finally:
        consumer.close()


def test_confluent_kafka_scram_sha_512_over_sasl_ssl(
    server: ServerProcess, pki: tuple[TestCa, Pem]
) -> None:
    ca, _server_pem = pki
    config = {
        "bootstrap.servers": kafka_address(server, 0),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca.ca_file,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    assert _consume_once(config, "scram-group") == [0, 1]
    # A wrong password: the client is told why (SASL_AUTHENTICATION_FAILED's message).
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth_error(
        {**config, "sasl.password": "wrong"}
    )


def auth_error(config: dict[str, object]) -> str:
    """The authentication error a librdkafka consumer reports with ``config``."""
    from confluent_kafka import Consumer, KafkaError

    errors: list[KafkaError] = []
    consumer = Consumer({**config, "group.id": "refused", "error_cb": errors.append})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
            e.code() == KafkaError._AUTHENTICATION for e in errors
        ):
            consumer.poll(0.1)
    finally:
        consumer.close()
    refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert refused, errors
    return str(refused[0].str())


def test_confluent_kafka_oauthbearer(
    server: ServerProcess, pki: tuple[TestCa, Pem], issuer: TokenIssuer
) -> None:
    ca, _server_pem = pki
    token = issuer.token("carol", lifetime_s=600)
    config = {
        "bootstrap.servers": kafka_address(server, 0),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca.ca_file,
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token, time.time() + 600),
    }
    assert _consume_once(config, "oauth-group") == [0, 1]
    expired = issuer.token("carol", lifetime_s=-120)
    message = auth_error({**config, "oauth_cb": lambda _config: (expired, time.time() + 600)})
    assert "the token has expired" in message


def test_kafka_python_plain_over_sasl_plaintext(server: ServerProcess) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import IncompatibleBrokerVersion
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=kafka_address(server, 1),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password="bob-secret",
        group_id="plain-group",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    try:
        consumer.subscribe(["sasl-topic"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            try:
                consumer.poll(100)
            except IncompatibleBrokerVersion:  # coordinator-only mode: no ListOffsets to fetch
                pass
        assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1]
        tp = TopicPartition("sasl-topic", 1)
        consumer.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert consumer.committed(tp) == 5
        # Past the 2 s session the client re-authenticates (KIP-368) and goes on.
        time.sleep(2.5)
        consumer.commit({tp: OffsetAndMetadata(6, "", -1)})
        assert consumer.committed(tp) == 6
    finally:
        consumer.close()


# ---------------------------------------------------------------- raw requests


class Raw:
    """A Kafka connection speaking by hand (flexible headers where the API needs them)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def send(self, key: int, version: int, body: bytes, flexible: bool = False) -> None:
        self.correlation += 1
        header = struct.pack(">hhih", key, version, self.correlation, 3) + b"raw"
        if flexible:
            header += b"\0"
        payload = header + body
        try:
            self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed by the server meanwhile: receive() says so

    def receive(self) -> bytes | None:
        """A response frame (without its size), or None once the server closed."""
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except ConnectionResetError:  # closed with our bytes unread
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def handshake(self, mechanism: str) -> int:
        name = mechanism.encode()
        self.send(17, 1, struct.pack(">h", len(name)) + name)
        reply = self.receive()
        assert reply is not None
        return int(struct.unpack_from(">h", reply, 4)[0])

    def authenticate(self, data: bytes) -> tuple[int, str, bytes, int] | None:
        """SaslAuthenticate v1: (error code, message, auth bytes, session lifetime ms)."""
        self.send(36, 1, struct.pack(">i", len(data)) + data)
        reply = self.receive()
        if reply is None:
            return None
        pos = 4
        code = struct.unpack_from(">h", reply, pos)[0]
        pos += 2
        (length,) = struct.unpack_from(">h", reply, pos)
        pos += 2
        message = reply[pos : pos + max(0, length)].decode()
        pos += max(0, length)
        (size,) = struct.unpack_from(">i", reply, pos)
        pos += 4
        auth = reply[pos : pos + size]
        pos += size
        (lifetime,) = struct.unpack_from(">q", reply, pos)
        return code, message, auth, lifetime

    def close(self) -> None:
        self.sock.close()


LIST_GROUPS_V0 = (16, 0, b"")


def test_raw_refusals_close_only_their_connection(server: ServerProcess) -> None:
    address = kafka_address(server, 1)  # SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256
    witness = Raw(address)
    assert witness.handshake("PLAIN") == 0
    assert witness.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    idle = Raw(address)  # authenticated, then silent until its session has expired
    assert idle.handshake("PLAIN") == 0
    assert idle.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]

    early = Raw(address)  # a request before authenticating: closed, no answer
    early.send(*LIST_GROUPS_V0)
    assert early.receive() is None

    mechanism = Raw(address)
    started = time.monotonic()
    assert mechanism.handshake("GSSAPI") == 33  # UNSUPPORTED_SASL_MECHANISM, then closed
    assert time.monotonic() - started >= 0.09  # every refusal waits the failure delay
    assert mechanism.closed()

    no_handshake = Raw(address)
    answer = no_handshake.authenticate(b"\0alice\0alice-secret")
    assert answer is not None and answer[0] == 34  # ILLEGAL_SASL_STATE
    assert no_handshake.closed()

    wrong = Raw(address)
    assert wrong.handshake("PLAIN") == 0
    started = time.monotonic()
    answer = wrong.authenticate(b"\0alice\0nope")
    assert answer is not None and answer[0] == 58 and "Invalid username or password" in answer[1]
    assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
    assert wrong.closed()

    huge = Raw(address)
    assert huge.handshake("PLAIN") == 0
    huge.send(36, 1, struct.pack(">i", 1 << 20) + b"x" * (1 << 20))  # over 512 KiB: closed
    assert huge.receive() is None

    # The witness, authenticated, is still served.
    witness.send(*LIST_GROUPS_V0)
    reply = witness.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    # Its session (2 s) expires: the next request closes the connection.
    time.sleep(2.2)
    witness.send(*LIST_GROUPS_V0)
    assert witness.receive() is None
    # ApiVersions too, as in Kafka: only a SaslHandshake may begin a re-authentication.
    idle.send(18, 0, b"")
    assert idle.receive() is None
    for conn in (witness, idle, early, mechanism, no_handshake, wrong, huge):
        conn.close()
    # Each refusal is counted (and written to the audit trail).
    failures = _failures(server)
    assert failures.get(("kafka", "PLAIN"), 0) >= 1, failures  # the wrong password
    assert failures.get(("kafka", "none"), 0) >= 3, failures  # early, mechanism, no handshake
    assert "authentication_failed" in server.stderr_text()


def _failures(server: ServerProcess) -> dict[tuple[str, str], float]:
    import urllib.request

    from coordinator.observability.metrics import parse_families

    assert server.metrics_address is not None
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as r:
        families = parse_families(r.read().decode())
    return {
        (s.labels["listener"], s.labels["mechanism"]): s.value
        for s in families.get("kip848_authentication_failures", [])
        if s.name.endswith("_total")
    }


def _oauth_conn(server: ServerProcess, ca: TestCa, token: str) -> tuple[Raw, int]:
    """A raw connection to the SASL_SSL listener (OAUTHBEARER; no connections.max.reauth.ms)
    authenticated with ``token``: (it, the session lifetime answered)."""
    conn = Raw(kafka_address(server, 0))
    context = ssl.create_default_context(cafile=ca.ca_file)
    conn.sock = context.wrap_socket(conn.sock, server_hostname="localhost")
    assert conn.handshake("OAUTHBEARER") == 0
    answer = conn.authenticate(b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01")
    assert answer is not None and answer[:2] == (0, ""), answer
    return conn, answer[3]


def test_an_oauthbearer_session_ends_with_its_token(
    server: ServerProcess, pki: tuple[TestCa, Pem], issuer: TokenIssuer
) -> None:
    """KIP-368 as Kafka's SaslServerAuthenticator computes a session's lifetime: a token's
    remaining lifetime, connections.max.reauth.ms set or not (this listener has none). The
    client is told it (SaslAuthenticate's session lifetime) and re-authenticates with a fresh
    token before it ends; a connection that does not is closed at its next request once the
    token has expired. Before: the lifetime was 0 without connections.max.reauth.ms, and a
    connection went on being served as the token's principal after the token expired."""
    ca, _server_pem = pki
    expiring, lifetime = _oauth_conn(server, ca, issuer.token("carol", lifetime_s=3))
    assert 1000 <= lifetime <= 3000
    renewed, _ = _oauth_conn(server, ca, issuer.token("carol", lifetime_s=3))
    for conn in (expiring, renewed):
        conn.send(*LIST_GROUPS_V0)
        reply = conn.receive()
        assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    time.sleep(1.1)  # re-authentications are at least a second apart (Kafka's)
    assert renewed.handshake("OAUTHBEARER") == 0  # a re-authentication, with a fresh token
    fresh = issuer.token("carol", lifetime_s=600)
    answer = renewed.authenticate(b"n,,\x01auth=Bearer " + fresh.encode() + b"\x01\x01")
    assert answer is not None and answer[0] == 0 and answer[3] > 500_000
    time.sleep(lifetime / 1000 + 0.2)  # the first token has expired
    expiring.send(*LIST_GROUPS_V0)
    assert expiring.receive() is None  # closed: its session ended with its token
    renewed.send(*LIST_GROUPS_V0)
    reply = renewed.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    for conn in (expiring, renewed):
        conn.close()


def test_reauthentication_as_another_user_is_refused(server: ServerProcess) -> None:
    conn = Raw(kafka_address(server, 1))
    assert conn.handshake("PLAIN") == 0
    first = conn.authenticate(b"\0alice\0alice-secret")
    assert first is not None and first[0] == 0 and first[3] == 2000  # the session's lifetime
    assert conn.handshake("PLAIN") == 0
    answer = conn.authenticate(b"\0bob\0bob-secret")
    assert answer is not None and answer[0] == 58 and "User:alice" in answer[1]
    assert conn.closed()
    conn.close()


def test_reauthentication_with_another_mechanism_fails_at_saslauthenticate(
    server: ServerProcess,
) -> None:
    """As Kafka's SaslServerAuthenticator (REAUTH_BAD_MECHANISM): a re-authentication naming
    another enabled mechanism than the session's gets its SaslHandshake answered without error;
    its SaslAuthenticate is not answered and the connection is closed after
    connection.failed.authentication.delay.ms, counted as a failed authentication. (Before: the
    handshake was answered ILLEGAL_SASL_STATE.)"""
    address = kafka_address(server, 1)  # SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256; 2 s sessions
    before = _failures(server).get(("kafka", "PLAIN"), 0)
    conn = Raw(address)
    assert conn.handshake("PLAIN") == 0
    assert conn.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    assert conn.handshake("SCRAM-SHA-256") == 0  # answered, as Kafka answers it
    started = time.monotonic()
    assert conn.authenticate(b"n,,n=alice,r=abcdefgh") is None  # no answer: closed
    assert time.monotonic() - started >= 0.09  # after the failure delay
    assert _failures(server).get(("kafka", "PLAIN"), 0) == before + 1
    conn.close()
    # The client reconnects and authenticates afresh; the same mechanism re-authenticates.
    again = Raw(address)
    assert again.handshake("PLAIN") == 0
    assert again.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    assert again.handshake("PLAIN") == 0
    assert again.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    again.send(*LIST_GROUPS_V0)
    reply = again.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    again.close()


def test_a_reauthentication_reads_frames_of_at_most_sasl_server_max_receive_size(
    server: ServerProcess,
) -> None:
    """During a re-authentication (KIP-368) as during the first one, a frame over Kafka's
    ``sasl.server.max.receive.size`` (512 KiB) closes the connection unread, as Kafka's
    SaslServerAuthenticator reads it; an authenticated connection's frames may be as large as
    ``socket.request.max.bytes``. (Before: up to socket.request.max.bytes during a
    re-authentication, read and answered.)"""
    conn = Raw(kafka_address(server, 1))
    assert conn.handshake("PLAIN") == 0
    first = conn.authenticate(b"\0alice\0alice-secret")
    assert first is not None and first[0] == 0
    assert conn.handshake("PLAIN") == 0  # a re-authentication begins
    assert conn.authenticate(b"\0alice\0" + b"x" * (600 * 1024)) is None
    assert conn.closed()
    conn.close()
    # The same size within bounds once more, on a fresh connection: answered, not closed.
    again = Raw(kafka_address(server, 1))
    assert again.handshake("PLAIN") == 0
    assert again.authenticate(b"\0alice\0alice-secret") is not None
    assert again.handshake("PLAIN") == 0
    answer = again.authenticate(b"\0alice\0" + b"x" * (400 * 1024))
    assert answer is not None and answer[0] == 58  # a wrong password, answered in band
    again.close()


def test_apiversions_of_a_sasl_listener_offers_the_sasl_apis(server: ServerProcess) -> None:
    conn = Raw(kafka_address(server, 1))
    conn.send(18, 0, b"")
    reply = conn.receive()
    assert reply is not None
    count = struct.unpack_from(">i", reply, 6)[0]
    keys = {
        struct.unpack_from(">h", reply, 10 + 6 * i)[0]: struct.unpack_from(">hh", reply, 12 + 6 * i)
        for i in range(count)
    }
    assert keys[17] == (1, 1) and keys[36] == (0, 2)
    conn.close()


def test_sasl_requests_of_an_authenticated_connection_are_answered_in_band(
    server: ServerProcess,
) -> None:
    """As Kafka's KafkaApis: a SaslAuthenticate outside an exchange, and a SaslHandshake that
    begins no re-authentication (the session has no end, or its last re-authentication began
    less than a second ago: KafkaChannel.maybeBeginServerReauthentication), are answered
    ILLEGAL_SASL_STATE and the connection stays; nothing is counted as a failed login."""
    before = _failures(server).get(("kafka", "none"), 0)
    after_auth = (34, "SaslAuthenticate request received after successful authentication")
    # Sessions without an end: no re-authentication at all.
    bare = Raw(kafka_address(server, 2))
    assert bare.handshake("PLAIN") == 0
    assert bare.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    assert bare.authenticate(b"\0alice\0alice-secret")[:2] == after_auth  # type: ignore[index]
    assert bare.handshake("PLAIN") == 34
    bare.send(*LIST_GROUPS_V0)
    reply = bare.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    # Sessions of 2 s: one re-authentication a second.
    conn = Raw(kafka_address(server, 1))
    assert conn.handshake("PLAIN") == 0
    assert conn.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    assert conn.authenticate(b"\0alice\0alice-secret")[:2] == after_auth  # type: ignore[index]
    assert conn.handshake("PLAIN") == 0  # a re-authentication begins
    answer = conn.authenticate(b"\0alice\0alice-secret")
    assert answer is not None and answer[0] == 0 and answer[3] == 2000
    assert conn.handshake("PLAIN") == 34  # less than a second after the last one began
    conn.send(*LIST_GROUPS_V0)
    reply = conn.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
    assert _failures(server).get(("kafka", "none"), 0) == before
    bare.close()
    conn.close()


def api_versions(conn: Raw, version: int = 0) -> tuple[int, int] | None:
    """ApiVersions v0 (or a version with an empty body): (error code, API keys), or None
    once the server closed."""
    conn.send(18, version, b"")
    reply = conn.receive()
    if reply is None:
        return None
    return struct.unpack_from(">h", reply, 4)[0], struct.unpack_from(">i", reply, 6)[0]


def test_api_versions_on_a_sasl_connection_as_kafkas_authenticator_reads_it(
    server: ServerProcess,
) -> None:
    """Kafka's SaslServerAuthenticator: one ApiVersions before the handshake (one of an
    unsupported version may be retried); between the handshake and the exchange's end,
    re-authentication included, ApiVersions is answered ILLEGAL_SASL_STATE with no API keys
    and the connection closed; once authenticated, as often as a client likes."""
    address = kafka_address(server, 1)  # sessions of 2 s
    twice = Raw(address)
    answer = api_versions(twice)
    assert answer is not None and answer[0] == 0 and answer[1] > 10
    assert api_versions(twice) is None  # closed, unanswered
    retried = Raw(address)
    answer = api_versions(retried, 99)
    assert answer is not None and answer[0] == 35  # UNSUPPORTED_VERSION, v0 body
    bad_name = b"\x02!\x021\x00"  # v3: client software name "!" (not Kafka's pattern)
    retried.send(18, 3, bad_name, flexible=True)
    reply = retried.receive()
    assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 42  # INVALID_REQUEST
    answer = api_versions(retried)
    assert answer is not None and answer[0] == 0
    assert retried.handshake("PLAIN") == 0
    assert retried.authenticate(b"\0alice\0alice-secret")[:2] == (0, "")  # type: ignore[index]
    for _ in range(3):
        answer = api_versions(retried)
        assert answer is not None and answer[0] == 0 and answer[1] > 10
    mid = Raw(address)
    assert mid.handshake("PLAIN") == 0
    started = time.monotonic()
    assert api_versions(mid) == (34, 0)  # ILLEGAL_SASL_STATE, then closed
    assert time.monotonic() - started >= 0.09  # after the failure delay, as Kafka
    assert mid.closed()
    # During a re-authentication too.
    assert retried.handshake("PLAIN") == 0
    assert api_versions(retried) == (34, 0)
    assert retried.closed()
    for conn in (twice, retried, mid):
        conn.close()
