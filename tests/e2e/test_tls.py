"""TLS on every listener of a real ``kip848 serve`` (docs/security.md, "Encryption: TLS"):
certificates made here (``tests/certs.py``), real clients (grpcio, aiokafka, the standard
library's HTTPS), the default h2 gRPC server, grpc.aio and its front ends.

* a TLS client is served; a plaintext client on a TLS port gets a closed connection and one
  log line; one that says nothing is closed after the handshake timeout; nobody else notices;
* ``ssl.client.auth=required`` refuses a client without a certificate;
* SIGHUP re-reads the certificates: open connections keep working, new ones get the new
  certificate;
* the metrics endpoint serves HTTPS; the Kafka listener serves SSL (aiokafka joins a group);
* ``ssl.cipher.suites`` gives TLS 1.2 exactly the suites listed, and TLS 1.3 only when its
  suites are listed;
* bad TLS settings are refused at start with the setting named.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from certs import Pem, TestCa
from conftest import ServerProcess, run_cli

from kip848.v1 import admin_pb2, admin_pb2_grpc

HANDSHAKE_MS = 700


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def creds(ca: TestCa, client: Pem | None = None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(_read(ca.ca_file))
    return grpc.ssl_channel_credentials(_read(ca.ca_file), _read(client.key), _read(client.cert))


def list_topics(channel: grpc.Channel) -> admin_pb2.ListTopicsResponse:
    return admin_pb2_grpc.AdminServiceStub(channel).ListTopics(
        admin_pb2.ListTopicsRequest(), timeout=10
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCa, Pem, Pem]:
    ca = TestCa(str(tmp_path_factory.mktemp("pki")))
    return ca, ca.server(), ca.client("alice", "CN=alice,OU=eng,O=kip848")


def tls_flags(ca: TestCa, server: Pem, *extra: str) -> tuple[str, ...]:
    return (
        "--tls-cert",
        server.both,
        "--tls-ca",
        ca.ca_file,
        "--set",
        f"ssl.handshake.timeout.ms={HANDSHAKE_MS}",
        *extra,
    )


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def plaintext_and_silent_clients_are_closed(server: ServerProcess) -> None:
    """A plaintext gRPC client fails at once; a client that sends nothing is closed once the
    handshake timeout passes; each leaves one line in the log; a TLS client meanwhile is
    served."""
    before = server.stderr_text().count("TLS handshake from")
    with grpc.insecure_channel(server.address) as plain:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            list_topics(plain)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 5
    silent = socket.create_connection(("127.0.0.1", _port(server.address)))
    silent.settimeout(10)
    started = time.monotonic()
    assert list_topics(server.channel).error_code == 0  # others are served meanwhile
    assert silent.recv(100) == b""  # closed by the server
    waited = time.monotonic() - started
    silent.close()
    assert HANDSHAKE_MS / 1000 - 0.2 < waited < HANDSHAKE_MS / 1000 + 3, waited
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = [
            line
            for line in server.stderr_text().splitlines()
            if "TLS handshake from" in line and "gRPC listener" in line
        ][before:]
        if len(lines) >= 2:
            break
        time.sleep(0.05)
    # grpc-core retries a refused connection: at least one line per attempt, each one line.
    assert any("not speaking TLS" in line for line in lines), lines
    assert any("no TLS handshake in time" in line for line in lines), lines


def test_grpc_tls_default_server(tmp_path: Path, pki: tuple[TestCa, Pem, Pem]) -> None:
    ca, server_pem, _alice = pki
    server = ServerProcess(tmp_path / "d", *tls_flags(ca, server_pem), credentials=creds(ca))
    try:
        assert list_topics(server.channel).error_code == 0
        plaintext_and_silent_clients_are_closed(server)
        warning = _open_warning(server)
        assert f"User:ANONYMOUS): gRPC {server.address} (SSL)." in warning, warning
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "transport", [("--grpc-transport", "grpcio"), ("--grpc-processes", "2")], ids=str
)
def test_grpc_mutual_tls_grpcio_and_front_ends(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem], transport: tuple[str, str]
) -> None:
    """grpc.aio (and its front ends, from the same files): a client certificate is required;
    a client without one, or with one from another CA, is refused."""
    ca, server_pem, alice = pki
    server = ServerProcess(
        tmp_path / "d",
        *tls_flags(ca, server_pem, "--tls-client-auth", "required", *transport),
        credentials=creds(ca, alice),
    )
    try:
        for _ in range(6):  # with front ends, connections land on any process
            with grpc.secure_channel(server.address, creds(ca, alice)) as channel:
                assert list_topics(channel).error_code == 0
        stranger_ca = TestCa(str(tmp_path), "CN=stranger CA")
        stranger = stranger_ca.client("mallory", "CN=mallory")
        for who in (None, stranger):
            with grpc.secure_channel(server.address, creds(ca, who)) as channel:
                with pytest.raises(grpc.RpcError) as refused:
                    list_topics(channel)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "User:ANONYMOUS" not in server.stderr_text()  # required certificates: not open
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("transport", [(), ("--grpc-transport", "grpcio")], ids=["h2", "grpcio"])
def test_sighup_reloads_certificates_without_dropping_connections(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem], transport: tuple[str, ...]
) -> None:
    ca, server_pem, _alice = pki
    live = tmp_path / "live.pem"
    shutil.copy(server_pem.both, live)
    server = ServerProcess(
        tmp_path / "d",
        *transport,
        "--tls-cert",
        str(live),
        "--metrics-listen",
        "127.0.0.1:0",
        credentials=creds(ca),
    )
    try:
        assert list_topics(server.channel).error_code == 0
        new_ca = TestCa(str(tmp_path), "CN=second CA")
        shutil.copy(new_ca.server("second").both, live)
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "certificates were reloaded" not in server.stderr_text():
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.05)
        # The open connection still works (same channel, same connection).
        assert list_topics(server.channel).error_code == 0
        # New connections get the new certificate: the new CA accepts it, the old one does not.
        with grpc.secure_channel(server.address, creds(new_ca)) as channel:
            assert list_topics(channel).error_code == 0
        with (
            grpc.secure_channel(server.address, creds(ca)) as channel,
            pytest.raises(grpc.RpcError),
        ):
            list_topics(channel)
        # The metrics endpoint follows too.
        assert server.metrics_address is not None
        context = ssl.create_default_context(cafile=new_ca.ca_file)
        with urllib.request.urlopen(
            f"https://localhost:{_port(server.metrics_address)}/metrics",
            context=context,
            timeout=10,
        ) as reply:
            assert b"kafka_group_coordinator" in reply.read() or reply.status == 200
        # A broken file is refused and the loaded certificate stays.
        live.write_bytes(b"not a certificate")
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "Reloading the TLS certificates of the gRPC listener failed" not in (
            server.stderr_text()
        ):
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.05)
        with grpc.secure_channel(server.address, creds(new_ca)) as channel:
            assert list_topics(channel).error_code == 0
    finally:
        assert server.stop() == 0


def test_metrics_over_https(tmp_path: Path, pki: tuple[TestCa, Pem, Pem]) -> None:
    ca, server_pem, _alice = pki
    server = ServerProcess(
        tmp_path / "d",
        *tls_flags(ca, server_pem, "--metrics-listen", "127.0.0.1:0"),
        credentials=creds(ca),
    )
    try:
        assert server.metrics_address is not None
        port = _port(server.metrics_address)
        context = ssl.create_default_context(cafile=ca.ca_file)
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/metrics", context=context, timeout=10
        ) as reply:
            text = reply.read().decode()
        assert "# TYPE" in text
        # Plain HTTP on the HTTPS port: the connection is closed, the log says why.
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        deadline = time.monotonic() + 5
        while "on the metrics listener failed" not in server.stderr_text():
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.05)
        assert "Serving metrics on https://" in server.stderr_text()
    finally:
        assert server.stop() == 0


def ssl_listener(tmp_path: Path, ca: TestCa, server_pem: Pem) -> tuple[ServerProcess, str]:
    """A coordinator-only server whose Kafka listener speaks SSL; its Kafka address."""
    server = ServerProcess(
        tmp_path / "d",
        *tls_flags(ca, server_pem, "--kafka-listen", "127.0.0.1:0"),
        "--kafka-security-protocol",
        "SSL",
        clock="system",
        credentials=creds(ca),
        lines=2,
    )
    return server, server.lines[1].removeprefix("kafka listening on ")


def test_kafka_listener_over_ssl_with_aiokafka(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem]
) -> None:
    """aiokafka over SSL (coordinator-only mode): joins a group, commits and reads back its
    offset; a plaintext Kafka client on the SSL port is closed (one log line)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    ca, server_pem, _alice = pki
    server, kafka = ssl_listener(tmp_path, ca, server_pem)
    context = create_ssl_context(cafile=ca.ca_file)

    server.create_topic("tls-topic", 2)

    async def story() -> None:
        consumer = AIOKafkaConsumer(
            "tls-topic",
            bootstrap_servers=kafka,
            group_id="tls-group",
            security_protocol="SSL",
            ssl_context=context,
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        try:
            for _ in range(200):
                if consumer.assignment():
                    break
                await asyncio.sleep(0.05)
            assert consumer.assignment() == {
                TopicPartition("tls-topic", 0),
                TopicPartition("tls-topic", 1),
            }
            await consumer.commit({TopicPartition("tls-topic", 1): 7})
            assert await consumer.committed(TopicPartition("tls-topic", 1)) == 7
        finally:
            await consumer.stop()

    try:
        asyncio.run(asyncio.wait_for(story(), 60))
        with socket.create_connection(("127.0.0.1", _port(kafka)), timeout=10) as plain:
            # An ApiVersions v0 request in plaintext.
            plain.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
            assert plain.recv(100) == b""
        deadline = time.monotonic() + 5
        while "on the Kafka SSL listener failed" not in server.stderr_text():
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.05)
    finally:
        assert server.stop() == 0


TLS13 = "TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_AES_128_GCM_SHA256"


def _handshake(
    address: str, ca: TestCa, ciphers: str | None = None, tls13: bool = True
) -> tuple[str, str]:
    """(protocol, suite) a standard-library TLS client negotiates with ``address``; ``ciphers``
    (OpenSSL's names) limits its TLS 1.2 offer, ``tls13=False`` its versions to TLS 1.2."""
    context = ssl.create_default_context(cafile=ca.ca_file)
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if not tls13:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", _port(address)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cipher = tls.cipher()
        assert cipher is not None
        return str(tls.version()), cipher[0]


def test_cipher_suites_are_honoured(tmp_path: Path, pki: tuple[TestCa, Pem, Pem]) -> None:
    """``ssl.cipher.suites`` with Kafka's names: the Kafka listener offers TLS 1.2 with the one
    suite listed, and no TLS 1.3 (none of its suites listed); the gRPC listener
    (``listener.name.grpc.``) lists TLS 1.3's too and negotiates TLS 1.3."""
    ca, server_pem, _alice = pki
    aes256 = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
    server = ServerProcess(
        tmp_path / "d",
        *tls_flags(ca, server_pem, "--kafka-listen", "127.0.0.1:0"),
        "--kafka-security-protocol",
        "SSL",
        "--set",
        f"ssl.cipher.suites={aes256}",
        "--set",
        f"listener.name.grpc.ssl.cipher.suites={TLS13},{aes256}",
        clock="system",
        credentials=creds(ca),
        lines=2,
    )
    try:
        kafka = server.lines[1].removeprefix("kafka listening on ")
        assert _handshake(kafka, ca) == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")
        with pytest.raises(ssl.SSLError):  # no suite in common
            _handshake(kafka, ca, "ECDHE-ECDSA-AES128-GCM-SHA256", tls13=False)
        assert _handshake(server.address, ca)[0] == "TLSv1.3"
        assert _handshake(server.address, ca, tls13=False) == (
            "TLSv1.2",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
        )
        assert list_topics(server.channel).error_code == 0  # grpc-core agrees
    finally:
        assert server.stop() == 0


def _open_warning(server: ServerProcess) -> str:
    """The start-up WARNING naming the listeners open to anonymous clients (written once the
    store is loaded)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in server.stderr_text().splitlines():
            if "Listeners open to anonymous clients" in line:
                assert " WARNING " in line, line
                return line
        time.sleep(0.05)
    raise AssertionError(server.stderr_text())


def _serve_fails(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), *flags, timeout=30
    )


def test_bad_tls_settings_are_refused_at_start(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem]
) -> None:
    ca, server_pem, _alice = pki
    missing = _serve_fails(tmp_path, "--tls-cert", str(tmp_path / "nope.pem"))
    assert missing.returncode == 1 and "nope.pem: no such file" in missing.stderr, missing.stderr
    old = _serve_fails(
        tmp_path, "--tls-cert", server_pem.both, "--set", "ssl.enabled.protocols=TLSv1.1"
    )
    assert old.returncode == 2 and "'TLSv1.1' is not accepted" in old.stderr, old.stderr
    no_ca = _serve_fails(tmp_path, "--tls-cert", server_pem.both, "--tls-client-auth", "required")
    assert no_ca.returncode == 2 and "ssl.truststore.location" in no_ca.stderr, no_ca.stderr
    requested = _serve_fails(
        tmp_path,
        *tls_flags(ca, server_pem, "--tls-client-auth", "requested"),
        "--grpc-transport",
        "grpcio",
    )
    assert requested.returncode == 1 and "requested" in requested.stderr, requested.stderr
    suites = _serve_fails(
        tmp_path,
        *tls_flags(ca, server_pem, "--set", "ssl.cipher.suites=ECDHE-ECDSA-AES256-GCM-SHA384"),
        "--grpc-transport",
        "grpcio",
    )
    assert suites.returncode == 1 and "takes no cipher suites" in suites.stderr, suites.stderr
    unknown = _serve_fails(tmp_path, *tls_flags(ca, server_pem, "--set", "ssl.cipher.suites=X"))
    assert unknown.returncode == 2 and "'X' is not a cipher suite" in unknown.stderr
    jks = _serve_fails(tmp_path, "--tls-cert", server_pem.both, "--set", "ssl.keystore.type=JKS")
    assert jks.returncode == 2 and "only PEM files" in jks.stderr, jks.stderr


def test_default_serve_warns_that_it_is_open(tmp_path: Path) -> None:
    """No security options: every RPC served to anonymous clients, as always, and the log says
    which listeners are open."""
    server = ServerProcess(tmp_path / "d", "--kafka-listen", "127.0.0.1:0", lines=2)
    try:
        assert list_topics(server.channel).error_code == 0
        kafka = server.lines[1].removeprefix("kafka listening on ")
        warning = _open_warning(server)
        assert f"gRPC {server.address} (PLAINTEXT); Kafka PLAINTEXT {kafka} (PLAINTEXT)." in warning
    finally:
        assert server.stop() == 0


def test_confluent_kafka_over_mutual_tls_meets_the_acls(tmp_path: Path) -> None:
    """librdkafka with a client certificate on an SSL listener requiring one: its subject,
    mapped by ssl.principal.mapping.rules, is User:alice, who joins the group she may read, is
    refused the one she may not, and cannot read that group's offsets."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    ca = TestCa(str(tmp_path))
    server_pem, admin, alice = (
        ca.server(),
        ca.client("admin", "CN=admin,O=kip848"),
        ca.client("alice", "CN=Alice,OU=eng,O=kip848"),
    )
    server = ServerProcess(
        tmp_path / "d",
        *tls_flags(ca, server_pem, "--tls-client-auth", "required"),
        "--kafka-listen",
        "127.0.0.1:0",
        "--kafka-security-protocol",
        "SSL",
        "--set",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/L",
        "--set",
        "super.users=User:admin",
        clock="system",
        credentials=creds(ca, admin),
        lines=2,
    )
    kafka = server.lines[1].removeprefix("kafka listening on ")
    try:
        server.create_topic("mtls-topic", 2)
        made = server.admin.CreateAcls(
            admin_pb2.CreateAclsRequest(
                creations=[
                    admin_pb2.AclBinding(
                        resource_type=rtype,
                        resource_name=name,
                        pattern_type=3,
                        principal=principal,
                        host="*",
                        operation=3,  # READ
                        permission_type=3,
                    )
                    for rtype, name, principal in (
                        (3, "mtls-alice", "User:alice"),
                        (2, "mtls-topic", "User:alice"),
                        (3, "mtls-other", "User:bob"),
                    )
                ]
            ),
            timeout=10,
        )
        assert [r.error_code for r in made.results] == [0, 0, 0], made
        config = {
            "bootstrap.servers": kafka,
            "security.protocol": "SSL",
            "ssl.ca.location": ca.ca_file,
            "ssl.certificate.location": alice.cert,
            "ssl.key.location": alice.key,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
        mine = Consumer({**config, "group.id": "mtls-alice"})
        try:
            mine.subscribe(["mtls-topic"])
            deadline = time.monotonic() + 30
            while not mine.assignment() and time.monotonic() < deadline:
                mine.poll(0.1)
            assert sorted(tp.partition for tp in mine.assignment()) == [0, 1]
        finally:
            mine.close()
        errors: list[KafkaError] = []
        other = Consumer({**config, "group.id": "mtls-other", "error_cb": errors.append})
        try:
            other.subscribe(["mtls-topic"])
            deadline = time.monotonic() + 20
            refused = None
            while refused is None and time.monotonic() < deadline:
                message = other.poll(0.1)
                if message is not None and message.error() is not None:
                    refused = message.error()
            assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert not other.assignment()
        finally:
            other.close()
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        admin_client = AdminClient(
            {k: v for k, v in config.items() if k.startswith(("bootstrap", "security", "ssl"))}
        )
        futures = admin_client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("mtls-other", [TopicPartition("mtls-topic", 0)])],
            request_timeout=10,
        )
        with pytest.raises(KafkaException) as offsets:
            futures["mtls-other"].result(timeout=30)
        assert offsets.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        # librdkafka's handle goes before the server: the ExceptionInfo above keeps this frame
        # (and so the client) alive in a reference cycle, retrying the stopped server.
        admin_client = None
        assert server.stop() == 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_tls_listener_out_of_file_descriptors_waits_instead_of_spinning(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem]
) -> None:
    """Connections beyond the process's file descriptors wait in the listening socket's backlog
    while accepting pauses for a second at a time, as asyncio's own servers do: the listening
    socket stays readable, and retrying it at once made the loop spin (a CPU busy and a log
    line per loop iteration) until a descriptor came free. Once one does, they are served."""
    ca, server_pem, _alice = pki
    server, kafka = ssl_listener(tmp_path, ca, server_pem)
    pid = server.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    waiting = []
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
        before = server.stderr_text().count("Accepting a connection")
        cpu = _cpu_s(pid)
        waiting = [socket.create_connection(("127.0.0.1", _port(kafka))) for _ in range(20)]
        time.sleep(3)
        spent = _cpu_s(pid) - cpu
        failed = server.stderr_text().count("Accepting a connection") - before
        assert 1 <= failed <= 5, failed  # about one a second
        assert spent < 1.0, spent
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    # Descriptors again: the waiting connections are accepted (and, silent, closed after the
    # handshake timeout); a TLS client is served.
    context = ssl.create_default_context(cafile=ca.ca_file)
    with (
        socket.create_connection(("127.0.0.1", _port(kafka)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
        assert struct.unpack(">ii", tls.recv(8))[1] == 7  # ApiVersions answered
    for s in waiting:
        s.close()
    assert server.stop() == 0


def test_cli_tls_mistakes_are_named_before_any_call_and_by_what_went_wrong(
    tmp_path: Path, pki: tuple[TestCa, Pem, Pem]
) -> None:
    """``kip848`` client commands: TLS files that are not what they should be are usage errors
    naming the file (before, grpc-core's log lines and "is kip848 serve running?"), a failed
    connection is explained by what failed (plaintext to TLS, TLS to plaintext, a certificate of
    another CA), and grpc-core's own log lines stay off stderr."""
    ca, server_pem, alice = pki
    (tmp_path / "other").mkdir()
    other = TestCa(str(tmp_path / "other"), name="CN=another CA,O=elsewhere")
    stranger = other.client("stranger", "CN=stranger")
    encrypted = ca.issue("locked", "CN=locked", password="secret")
    (tmp_path / "notes.txt").write_text("not a certificate\n")
    notes = str(tmp_path / "notes.txt")
    tls = ServerProcess(tmp_path / "tls", *tls_flags(ca, server_pem), credentials=creds(ca))
    plain = ServerProcess(tmp_path / "plain")
    try:
        usage = {
            (
                "--tls-ca",
                notes,
            ): f"kip848 groups: TLS: {notes} holds no PEM certificate to trust "
            "(NO_CERTIFICATE_OR_CRL_FOUND)",
            (
                "--tls-ca",
                ca.ca_file,
                "--tls-cert",
                alice.cert,
                "--tls-key",
                stranger.key,
            ): f"kip848 groups: TLS: the private key in {stranger.key} is not the key of the "
            f"certificate in {alice.cert}",
            (
                "--tls-ca",
                ca.ca_file,
                "--tls-cert",
                encrypted.both,
            ): f"kip848 groups: TLS: the private key in {encrypted.both} is encrypted: give an "
            "unencrypted PEM key (gRPC reads no encrypted keys)",
            (
                "--tls-ca",
                ca.ca_file,
                "--tls-cert",
                alice.cert,
            ): f"kip848 groups: TLS: {alice.cert}: not a PEM certificate chain with its private "
            "key (the key may be in the certificate's file or apart)",
            (
                "--tls-ca",
                ca.ca_file,
                "--tls-key",
                alice.key,
            ): f"kip848 groups: TLS: a private key ({alice.key}) was given without its certificate",
        }
        for flags, message in usage.items():
            p = run_cli("groups", "list", "--bootstrap-server", tls.address, *flags)
            assert (p.returncode, p.stdout) == (2, ""), (flags, p.stderr)
            assert p.stderr.splitlines()[-1] == message, flags
        failed = {
            (tls.address, ()): f"  hint: {tls.address} closed the connection: if it serves "
            "TLS, give --tls-ca (or security.protocol=SSL in --command-config); else is it a "
            "kip848 gRPC port?",
            (plain.address, ("--tls-ca", ca.ca_file)): f"  hint: the server at {plain.address} "
            "does not speak TLS: leave out --tls-ca/--tls-cert (and security.protocol=SSL in "
            "--command-config) for a plaintext server",
            (tls.address, ("--tls-ca", other.ca_file)): f"  hint: the TLS handshake with "
            f"{tls.address} failed: --tls-ca (ssl.truststore.location) must hold the CA the "
            "server's certificate chains to, for the address you connect to; with --tls-cert, "
            "the server must trust its CA",
        }
        for (address, flags), hint in failed.items():
            p = run_cli("groups", "list", "--bootstrap-server", address, "--timeout", "3", *flags)
            assert (p.returncode, p.stdout) == (1, ""), (flags, p.stderr)
            lines = p.stderr.splitlines()
            assert len(lines) == 2 and lines[0].startswith(f"kip848: {address}: UNAVAILABLE: ")
            assert lines[1] == hint
        p = run_cli("groups", "list", "--bootstrap-server", tls.address, "--tls-ca", ca.ca_file)
        assert (p.returncode, p.stderr) == (0, "")
    finally:
        assert tls.stop() == 0
        assert plain.stop() == 0
