"""Fuzzed SASL exchanges and TLS garbage against a real ``kip848 serve`` (seeded; the seed is in
the failure message): truncated and garbage TLS handshakes, plaintext on TLS ports, wrong and
absurd mechanisms, malformed PLAIN/SCRAM/OAUTHBEARER messages, 1 MB tokens, and a storm of
re-authentications (one a second per connection, as Kafka allows; the rest answered
ILLEGAL_SASL_STATE). Every attempt ends refused (an answer with Kafka's error, or a closed
connection) within a bounded time, never crashes the server, never disturbs an authenticated
witness connection that keeps being served throughout, and the server's memory stays bounded."""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from certs import TestCa
from conftest import ServerProcess
from jwks import TokenIssuer
from test_sasl import Raw, add_user

SEED = int(os.environ.get("KIP848_FUZZ_SEED", "20261128"))
ROUNDS = 240
RSS_GROWTH_LIMIT_KB = 96 * 1024


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("fuzz")
    ca = TestCa(str(root))
    pem = ca.server()
    issuer = TokenIssuer(root)
    server = ServerProcess(
        root / "d",
        "--tls-cert",
        pem.both,
        "--set",
        "ssl.handshake.timeout.ms=500",
        "--set",
        "listeners=SECURE://127.0.0.1:0,PLAIN://127.0.0.1:0",
        "--set",
        "listener.security.protocol.map=SECURE:SASL_SSL,PLAIN:SASL_PLAINTEXT",
        "--set",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "--set",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{issuer.path}",
        "--set",
        "listener.name.plain.connections.max.reauth.ms=60000",
        clock="system",
        lines=3,
        credentials=grpc.ssl_channel_credentials(Path(ca.ca_file).read_bytes()),
    )
    add_user(server.channel, "alice", "alice-secret")
    yield server, ca, issuer
    assert server.stop() == 0


def _address(server: ServerProcess, index: int) -> tuple[str, int]:
    host, _, port = server.lines[1 + index].rpartition(" ")[2].rpartition(":")
    return host, int(port)


def _drain(sock: socket.socket, deadline: float) -> None:
    """Read until the server closes the connection (it must, before ``deadline``)."""
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "the server kept the connection open"
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return
        except (ConnectionResetError, BrokenPipeError):
            return


def tls_garbage(rng: random.Random, address: tuple[str, int]) -> None:
    kind = rng.randrange(5)
    with socket.create_connection(address, timeout=5) as sock:
        try:
            if kind == 0:  # random bytes
                sock.sendall(rng.randbytes(rng.randrange(1, 3000)))
            elif kind == 1:  # a TLS record header promising more than follows
                sock.sendall(b"\x16\x03\x01" + struct.pack(">H", 512) + rng.randbytes(40))
            elif kind == 2:  # a plaintext Kafka request
                sock.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
            elif kind == 3:  # an HTTP/2 preface
                sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            # kind 4: nothing at all (closed at the handshake timeout)
        except (BrokenPipeError, ConnectionResetError):
            return
        _drain(sock, time.monotonic() + 5)


def _string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def sasl_fuzz(rng: random.Random, address: tuple[str, int], issuer: TokenIssuer) -> None:
    """One connection's worth of a fuzzed SASL exchange; it must end refused."""
    conn = Raw(f"{address[0]}:{address[1]}")
    try:
        choice = rng.randrange(7)
        if choice == 0:  # a wrong or absurd mechanism
            name = rng.choice([b"GSSAPI", b"", b"plain", rng.randbytes(40), b"X" * 30000])
            conn.send(17, 1, _string(name))
        elif choice == 1:  # SaslAuthenticate first
            conn.send(36, 1, struct.pack(">i", 3) + b"abc")
        elif choice == 2:  # an API other than the SASL ones first
            conn.send(16, rng.choice([0, 3]), b"" if rng.random() < 0.5 else b"\0")
        else:
            mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
            assert conn.handshake(mechanism) == 0
            payload = {
                3: lambda: b"\0alice\0" + rng.randbytes(rng.randrange(0, 40)),
                4: lambda: b"n,,n=alice,r=" + rng.randbytes(rng.randrange(0, 60)),
                5: lambda: (
                    b"n,,\x01auth=Bearer "
                    + rng.choice(
                        [issuer.token("alice", lifetime_s=-60).encode(), rng.randbytes(300)]
                    )
                    + b"\x01\x01"
                ),
                6: lambda: b"x" * (1 << 20),  # a 1 MB token: over sasl.server.max.receive.size
            }[choice]()
            if (mechanism.startswith("SCRAM") and choice == 4) or (
                mechanism == "OAUTHBEARER" and choice == 5
            ):
                answer = conn.authenticate(payload)
                if answer is not None and answer[0] == 0 and b"invalid_token" in answer[2]:
                    conn.send(36, 1, struct.pack(">i", 1) + b"\x01")  # Kafka's answer to it
                elif answer is not None and answer[0] == 0:  # a server-first: a wrong proof
                    conn.authenticate(b"c=biws,r=x,p=" + rng.randbytes(20).hex().encode())
            else:
                conn.send(36, 1, struct.pack(">i", len(payload)) + payload)
        _drain(conn.sock, time.monotonic() + 5)
    finally:
        conn.close()


def reauthenticate(address: tuple[str, int], times: int) -> None:
    """Authenticate, then ``times`` SaslHandshakes back to back: as in Kafka, one begins a
    re-authentication only a second after the last one began (else it is answered
    ILLEGAL_SASL_STATE and the connection stays); judged by the client's clock, a handshake
    sent a second after the last begun one's answer begins one, one answered within a second
    of its sending does not."""
    conn = Raw(f"{address[0]}:{address[1]}")
    try:
        assert conn.handshake("PLAIN") == 0
        answer = conn.authenticate(b"\0alice\0alice-secret")
        assert answer is not None and answer[0] == 0 and answer[3] == 60000, answer
        last: tuple[float, float] | None = None  # the last begun one: (sent, answered)
        for _ in range(times):
            sent = time.monotonic()
            code = conn.handshake("PLAIN")
            answered = time.monotonic()
            if last is not None and answered - last[0] < 1.0:
                assert code == 34, code
            elif last is None or sent - last[1] >= 1.0:
                assert code == 0, code
            if code == 0:
                last = (sent, answered)
                answer = conn.authenticate(b"\0alice\0alice-secret")
                assert answer is not None and answer[0] == 0 and answer[3] == 60000, answer
            else:
                assert code == 34, code
    finally:
        conn.close()


@pytest.mark.slow
def test_fuzzed_handshakes_and_exchanges_are_refused_and_harmless(target) -> None:  # type: ignore[no-untyped-def]
    server, ca, issuer = target
    secure, plain = _address(server, 0), _address(server, 1)
    grpc_host, _, grpc_port = server.address.rpartition(":")
    rng = random.Random(SEED)
    witness = Raw(f"{plain[0]}:{plain[1]}")
    assert witness.handshake("PLAIN") == 0
    assert witness.authenticate(b"\0alice\0alice-secret")[0] == 0  # type: ignore[index]
    stop = threading.Event()
    served = [0]

    def witness_loop() -> None:
        while not stop.is_set():
            witness.send(16, 0, b"")
            reply = witness.receive()
            assert reply is not None and struct.unpack_from(">h", reply, 4)[0] == 0
            served[0] += 1
            time.sleep(0.02)

    rss_before = rss_kb(server.proc.pid)
    jobs = []
    for _ in range(ROUNDS):
        what = rng.randrange(3)
        seed = rng.randrange(1 << 30)
        if what == 0:
            jobs.append(("tls", seed, rng.choice([secure, (grpc_host, int(grpc_port))])))
        else:
            jobs.append(("sasl", seed, rng.choice([plain, plain, secure])))
    with ThreadPoolExecutor(max_workers=16) as pool:
        watcher = pool.submit(witness_loop)

        def run(job: tuple[str, int, tuple[str, int]]) -> None:
            kind, seed, address = job
            job_rng = random.Random(seed)
            if kind == "tls" or address == secure:
                if kind == "sasl":  # the SASL fuzz over TLS
                    context = ssl.create_default_context(cafile=ca.ca_file)
                    with (
                        socket.create_connection(address, timeout=5) as raw,
                        context.wrap_socket(raw, server_hostname="localhost") as tls_sock,
                    ):
                        tls_sock.sendall(b"\x00\x00\x00\x04\x00\x10\x00\x00")
                        _drain(tls_sock, time.monotonic() + 5)
                    return
                tls_garbage(job_rng, address)
            else:
                sasl_fuzz(job_rng, address, issuer)

        try:
            futures = [(job, pool.submit(run, job)) for job in jobs]
            for job, future in futures:
                try:
                    future.result(timeout=60)
                except Exception as exc:
                    raise AssertionError(f"{job}: {exc!r}") from exc
            # A storm of re-authentications: 16 connections x 25 handshakes.
            for future in [pool.submit(reauthenticate, plain, 25) for _ in range(16)]:
                future.result(timeout=60)
        except BaseException as exc:
            raise AssertionError(f"seed {SEED}: {exc!r}") from exc
        finally:
            stop.set()
            watcher.result(timeout=10)
    assert served[0] > 10, f"seed {SEED}: the witness was not served meanwhile"
    assert server.proc.poll() is None, f"seed {SEED}: the server died: {server.stderr_text()}"
    growth = rss_kb(server.proc.pid) - rss_before
    assert growth < RSS_GROWTH_LIMIT_KB, f"seed {SEED}: RSS grew by {growth} kB"
    assert "Traceback" not in server.stderr_text(), server.stderr_text()[-3000:]
    witness.close()
