"""TLS for every listener and for the coordinator's own connections (docs/security.md, "4.
Encryption: TLS").

Certificates, keys and CAs are PEM files, named as Kafka names them with
``ssl.keystore.type=PEM``: ``ssl.keystore.location`` (the certificate chain, and the private
key unless ``ssl.keystore.key.location``... see :class:`TlsFiles`), ``ssl.key.password``,
``ssl.truststore.location`` (CA certificates), ``ssl.client.auth`` (``none`` | ``requested``
| ``required``), ``ssl.enabled.protocols`` (``TLSv1.2,TLSv1.3``; nothing older is accepted),
``ssl.cipher.suites`` (:func:`cipher_suites`: Kafka's IANA names or OpenSSL's).

How a listener runs TLS (:class:`ServerTls`, :class:`TlsServer`): connections are accepted
as plain sockets and each one's handshake runs on its own (``loop.connect_accepted_socket``)
under a bounded timeout, with the context current at that moment. So:

* a client that is not speaking TLS (a plaintext Kafka or gRPC client, garbage) fails its
  handshake: its connection is closed and one line is logged; one that sends nothing is closed
  when the handshake timeout passes — never a hang, and never anybody else's delay;
* :meth:`ServerTls.reload` (SIGHUP) re-reads the files into a new context: connections made
  from then on get it, those already open keep theirs (nothing is dropped). Files that do not
  load are logged and the old context stays.

The client side (:func:`client_context`) is what the coordinator uses to reach the upstream
broker: the truststore's CAs (or the system's), the hostname checked unless
``ssl.endpoint.identification.algorithm`` is empty, a client certificate if a keystore is set.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from .conn_limits import ConnectionQuotas, Slot

log = logging.getLogger("kip848.tls")

PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
"""``ssl.enabled.protocols`` values we accept (TLS 1.2 and later only)."""
CLIENT_AUTH = ("none", "requested", "required")
DEFAULT_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000
"""How long a TLS handshake may take before the connection is closed (``ssl.handshake.timeout.ms``,
ours: Kafka bounds it with its idle timeout)."""


class TlsConfigError(ValueError):
    """TLS settings or files that cannot be used (the message names the setting or file)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsFiles:
    """One side's TLS material and rules.

    ``certificate``: PEM file with the certificate chain, leaf first; it may hold the private
    key too (Kafka's PEM keystore holds both). ``key``: a separate PEM key file (None: in
    ``certificate``). ``key_password``: decrypts an encrypted key. ``ca``: PEM file of CA
    certificates that client (server side) or server (client side) certificates must chain to.
    ``client_auth``: server side, whether a client certificate is asked for and required.
    ``check_hostname``: client side (``ssl.endpoint.identification.algorithm=https``)."""

    certificate: str | None = None
    key: str | None = None
    key_password: str | None = None
    ca: str | None = None
    client_auth: str = "none"
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    check_hostname: bool = True
    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS
    cipher_suites: tuple[str, ...] = ()
    """``ssl.cipher.suites`` (empty: OpenSSL's defaults), see :func:`cipher_suites`."""

    def check(self, *, server: bool) -> None:
        """Refuse settings that cannot work, before any file is read."""
        if server and not self.certificate:
            raise TlsConfigError(
                "TLS needs a certificate: ssl.keystore.location (or --tls-cert), a PEM file"
            )
        if self.key and not self.certificate:
            raise TlsConfigError("a key file without a certificate (ssl.keystore.location)")
        if self.client_auth not in CLIENT_AUTH:
            raise TlsConfigError(
                f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, got {self.client_auth!r}"
            )
        if server and self.client_auth != "none" and not self.ca:
            raise TlsConfigError(
                f"ssl.client.auth={self.client_auth} needs the CAs client certificates are "
                "checked against: ssl.truststore.location (or --tls-ca)"
            )
        if not self.protocols:
            raise TlsConfigError("ssl.enabled.protocols is empty")
        for name in self.protocols:
            if name not in PROTOCOL_VERSIONS:
                raise TlsConfigError(
                    f"ssl.enabled.protocols: {name!r} is not accepted (TLSv1.2 and TLSv1.3 "
                    "only: older protocols are broken)"
                )
        if self.handshake_timeout_ms < 1:
            raise TlsConfigError("ssl.handshake.timeout.ms must be >= 1")
        self.versions()

    def versions(self) -> tuple[ssl.TLSVersion, ssl.TLSVersion, str | None]:
        """(lowest, highest TLS version, the TLS 1.2 suites in OpenSSL's cipher-list syntax or
        None for OpenSSL's defaults), as ``ssl.enabled.protocols`` and ``ssl.cipher.suites``
        allow them together; :class:`TlsConfigError` when they allow nothing."""
        chosen = sorted(PROTOCOL_VERSIONS[name] for name in self.protocols)
        if not self.cipher_suites:
            return chosen[0], chosen[-1], None
        tls12, tls13 = cipher_suites(self.cipher_suites)
        usable = [
            v
            for v in chosen
            if (tls12 if v == ssl.TLSVersion.TLSv1_2 else tls13)  # a suite of its own listed
        ]
        if not usable:
            raise TlsConfigError(
                f"ssl.cipher.suites names no suite of the enabled protocols "
                f"({', '.join(self.protocols)})"
            )
        return usable[0], usable[-1], ":".join(tls12) or None


CIPHER_KX = {
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "ECDHE_RSA": "ECDHE-RSA-",
    "DHE_RSA": "DHE-RSA-",
    "DHE_DSS": "DHE-DSS-",
    "RSA": "",
}
"""The key exchanges of an IANA suite name (``TLS_<kx>_WITH_<cipher>``), as OpenSSL prefixes
them."""
_IANA_CIPHER = re.compile(r"(AES|CAMELLIA|ARIA)_(128|256)_(?:CBC_)?(.+)")


@cache
def _tls13_suites() -> frozenset[str]:
    """The TLS 1.3 suites OpenSSL enables: Python's ``ssl`` can neither add nor remove one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    return frozenset(c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3")


def openssl_suite(name: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given as Kafka (Java) names it, IANA's
    ``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`` -> ``ECDHE-RSA-AES256-GCM-SHA384``; an OpenSSL
    name is returned as it is."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    prefix = CIPHER_KX.get(kx)
    if rest == "CHACHA20_POLY1305_SHA256" and prefix:
        return prefix + "CHACHA20-POLY1305"
    found = _IANA_CIPHER.fullmatch(rest)
    if prefix is None or found is None:
        return name  # judged (and refused) by OpenSSL: it knows no such name
    family, bits, tail = found.groups()
    if family == "ARIA" and kx == "ECDHE_RSA":
        prefix = "ECDHE-"  # OpenSSL's one irregular name
    tail = "CCM8" if tail == "CCM_8" else tail.replace("_", "-")
    return f"{prefix}{family}{bits}-{tail}"


def cipher_suites(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """``ssl.cipher.suites`` checked: (the TLS 1.2 suites as OpenSSL names them, the TLS 1.3
    suites). Each name must be one suite OpenSSL has. TLS 1.3's cannot be chosen through
    Python's ``ssl``: they must be all of OpenSSL's or none (none turns TLS 1.3 off, as a
    Java broker with no TLS 1.3 suite listed cannot negotiate it)."""
    tls12, tls13 = [], []
    for name in names:
        if name in _tls13_suites():
            tls13.append(name)
            continue
        suite = openssl_suite(name)
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.set_ciphers(suite)
        except ssl.SSLError:
            selected: list[str] = []
        else:
            selected = [c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3"]
        if selected != [suite]:
            raise TlsConfigError(
                f"ssl.cipher.suites: {name!r} is not a cipher suite this OpenSSL has "
                f"({ssl.OPENSSL_VERSION}); name suites as Kafka does "
                "(TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384) or as OpenSSL does"
            )
        tls12.append(suite)
    if tls13 and set(tls13) != _tls13_suites():
        raise TlsConfigError(
            "ssl.cipher.suites: TLS 1.3 suites cannot be chosen one by one here (Python's ssl "
            f"module): list all of {', '.join(sorted(_tls13_suites()))} or none of them (none: "
            "no TLS 1.3)"
        )
    return tls12, tls13


def set_versions(context: ssl.SSLContext, files: TlsFiles) -> None:
    """The TLS versions and TLS 1.2 suites ``files`` allow (:meth:`TlsFiles.versions`)."""
    lowest, highest, tls12 = files.versions()
    context.minimum_version = lowest
    context.maximum_version = highest
    if tls12 is not None:
        context.set_ciphers(tls12)


def _load_chain(context: ssl.SSLContext, files: TlsFiles) -> None:
    assert files.certificate is not None
    for path in (files.certificate, files.key):
        if path is not None and not os.path.isfile(path):
            raise TlsConfigError(f"cannot read {path}: no such file")
    try:
        context.load_cert_chain(files.certificate, files.key, files.key_password)
    except (OSError, ssl.SSLError) as exc:
        where = files.certificate if files.key is None else f"{files.certificate}, {files.key}"
        raise TlsConfigError(
            f"cannot load the certificate and key from {where}: {_reason(exc)} (a PEM "
            "certificate chain and its private key; an encrypted key needs ssl.key.password)"
        ) from None


def _load_ca(context: ssl.SSLContext, ca: str) -> None:
    if not os.path.isfile(ca):
        raise TlsConfigError(f"cannot read {ca}: no such file")
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load CA certificates from {ca}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def server_context(files: TlsFiles, alpn: Sequence[str] = ()) -> ssl.SSLContext:
    """A server-side context from ``files`` (read now). Raises :class:`TlsConfigError`."""
    files.check(server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    set_versions(context, files)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    _load_chain(context, files)
    if files.ca:
        _load_ca(context, files.ca)
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[files.client_auth]
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def client_context(files: TlsFiles, alpn: Sequence[str] = ()) -> ssl.SSLContext:
    """A client-side context: the server's certificate checked against ``files.ca`` (the
    system's CAs without one), its host name too unless ``check_hostname`` is off; a client
    certificate when ``files.certificate`` is set."""
    files.check(server=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    set_versions(context, files)
    if files.ca:
        _load_ca(context, files.ca)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = files.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if files.certificate:
        _load_chain(context, files)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def read_pem(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fp:
            return fp.read()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def key_and_chain(files: TlsFiles) -> tuple[bytes, bytes]:
    """(unencrypted PEM private key, PEM certificate chain) from ``files``, as grpc-core takes
    them (it reads no encrypted keys: one is decrypted here with ``ssl.key.password``)."""
    from cryptography.hazmat.primitives import serialization

    assert files.certificate is not None
    cert_pem = read_pem(files.certificate, "certificate")
    key_pem = cert_pem if files.key is None else read_pem(files.key, "key")
    password = None if files.key_password is None else files.key_password.encode()
    try:
        key = serialization.load_pem_private_key(_pem_blocks(key_pem, "PRIVATE KEY"), password)
    except (ValueError, TypeError) as exc:
        raise TlsConfigError(
            f"cannot load the private key from {files.key or files.certificate}: {exc}"
        ) from None
    chain = _pem_blocks(cert_pem, "CERTIFICATE")
    if not chain:
        raise TlsConfigError(f"no certificate in {files.certificate}")
    plain = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return plain, chain


def _pem_blocks(data: bytes, kind: str) -> bytes:
    """The PEM blocks of ``data`` whose type ends with ``kind`` (``PRIVATE KEY`` matches
    ``RSA PRIVATE KEY``, ``ENCRYPTED PRIVATE KEY``...), concatenated."""
    out = []
    lines = data.splitlines(keepends=True)
    block: list[bytes] | None = None
    for line in lines:
        text = line.strip()
        if block is None:
            if text.startswith(b"-----BEGIN ") and text.endswith(kind.encode() + b"-----"):
                block = [line]
        else:
            block.append(line)
            if text.startswith(b"-----END "):
                out.append(b"".join(block))
                block = None
    return b"".join(out)


def peer_subject(transport: asyncio.BaseTransport) -> str | None:
    """The subject of the client certificate a TLS connection presented and that was verified
    (RFC 2253 form, most specific first, as Java's ``X500Principal.getName()`` writes it);
    None without one."""
    sslobj = transport.get_extra_info("ssl_object")
    if sslobj is None:
        return None
    der = sslobj.getpeercert(binary_form=True)
    if not der:
        return None
    return subject_of_der(der)


def subject_of_der(der: bytes) -> str:
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def subject_of_pem(pem: bytes) -> str:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem).subject.rfc4514_string()


class ServerTls:
    """One listener's TLS (see the module doc): the context new connections get, re-read by
    :meth:`reload`, and the protocol factory that upgrades each accepted connection."""

    def __init__(self, name: str, files: TlsFiles, alpn: Sequence[str] = ()) -> None:
        self.name = name
        self.files = files
        self.alpn = tuple(alpn)
        self.context = server_context(files, self.alpn)
        self.handshake_timeout_s = files.handshake_timeout_ms / 1000
        self.failed_handshakes = 0
        self.on_reload: list[Callable[[], None]] = []
        """Called after a successful reload (grpc.aio's certificate fetcher, front ends)."""
        self.on_failed: Callable[[str, str, str, str], None] | None = None
        """Called with (listener, "tls", peer, reason) for each failed handshake (metrics)."""

    def reload(self) -> bool:
        """Re-read the files; new connections get them. False (logged, old context kept) if
        they do not load."""
        try:
            context = server_context(self.files, self.alpn)
        except TlsConfigError as exc:
            log.error(
                "Reloading the TLS certificates of the %s listener failed (the ones loaded "
                "before stay in use): %s",
                self.name,
                exc,
            )
            return False
        self.context = context
        for callback in self.on_reload:
            callback()
        log.info("The %s listener's TLS certificates were reloaded.", self.name)
        return True

    def handshake_failed(self, peer: str, exc: BaseException) -> None:
        """One line for a connection whose handshake failed (it is closed)."""
        self.failed_handshakes += 1
        if self.on_failed is not None:
            self.on_failed(self.name.split()[0].lower(), "tls", peer, _reason(exc))
        log.info(
            "TLS handshake from %s on the %s listener failed; connection closed: %s%s",
            peer,
            self.name,
            _reason(exc),
            _hint(exc),
        )

    @property
    def client_auth(self) -> str:
        return self.files.client_auth

    def serve(
        self,
        sockets: Sequence[socket.socket],
        make: Callable[[Slot | None], asyncio.Protocol],
        quotas: ConnectionQuotas | None = None,
    ) -> TlsServer:
        """Accept connections on the listening ``sockets`` (bound, listening, non-blocking):
        each is upgraded to TLS with the context current then, and handed to ``make(slot)``'s
        protocol once the handshake is done (its ``connection_made`` gets the TLS transport).
        ``quotas``: the listener's connection limits, counted as a connection is accepted,
        before its handshake (refused: closed at once); ``slot`` is its count, which the
        protocol releases when it is closed, and this server if the handshake fails."""
        server = TlsServer(self, sockets, make, quotas)
        server.start()
        return server


def keep_alive(transport: asyncio.BaseTransport) -> None:
    """TCP keepalive on a connection's socket, as Kafka sets it on every accepted socket
    (SocketServer) and every connection it makes (Selector): a peer that vanished without a word
    (its machine gone, a cut) is found out by the kernel's probes and the connection closed,
    rather than held for ever (a client waiting for an answer the upstream never gives)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def listening_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for ``host`` (every address it resolves to; empty: all interfaces)
    and ``port`` (0: one free port, the same for all), as ``loop.create_server`` binds them."""
    infos = socket.getaddrinfo(
        host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    out: list[socket.socket] = []
    seen = set()
    try:
        for family, kind, proto, _name, address in infos:
            if (family, address[0]) in seen:
                continue
            seen.add((family, address[0]))
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in out:
            sock.close()
        raise
    return out


class TlsServer:
    """Listening sockets whose connections are TLS (:meth:`ServerTls.serve`); what the
    listeners use of ``asyncio.AbstractServer``: ``sockets``, ``close()``, ``wait_closed()``.

    Connections are accepted here (as many as are waiting, each time a socket is readable)
    and each handshake runs in a task of its own (``loop.connect_accepted_socket``), so the
    handshake timeout, the context of the moment and the failure's log line are ours."""

    def __init__(
        self,
        tls: ServerTls,
        sockets: Sequence[socket.socket],
        make: Callable[[Slot | None], asyncio.Protocol],
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self.tls = tls
        self.sockets = list(sockets)
        self.make = make
        self.quotas = quotas
        self.handshakes: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self._serving = False

    def start(self) -> None:
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
        self._serving = True

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in ACCEPT_PAUSE_ERRNOS:
                    # Out of file descriptors or memory: the listening socket stays readable,
                    # so it is left alone for a while (its connections wait in the backlog),
                    # as asyncio's own servers do; retried at once, the loop would spin.
                    log.warning(
                        "Accepting a connection on the %s listener failed: %s; accepting again "
                        "in %.0f s",
                        self.tls.name,
                        exc,
                        ACCEPT_RETRY_S,
                    )
                    self._loop.remove_reader(sock.fileno())
                    self._loop.call_later(ACCEPT_RETRY_S, self._accept_again, sock)
                    return
                log.warning(
                    "Accepting a connection on the %s listener failed: %s", self.tls.name, exc
                )
                return
            slot = None
            if self.quotas is not None:
                slot = self.quotas.take(address)
                if slot is None:  # over a connection limit: closed before anything is read
                    conn.close()
                    continue
            conn.setblocking(False)
            task = self._loop.create_task(self._handshake(conn, address, slot))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    def _accept_again(self, sock: socket.socket) -> None:
        if self._serving:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _handshake(self, conn: socket.socket, address: Any, slot: Slot | None) -> None:
        tls = self.tls
        peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        try:
            await self._loop.connect_accepted_socket(
                lambda: self.make(slot),
                conn,
                ssl=tls.context,
                ssl_handshake_timeout=tls.handshake_timeout_s,
            )
        except (OSError, ssl.SSLError, EOFError, TimeoutError) as exc:
            tls.handshake_failed(peer, exc)
            conn.close()
            if slot is not None:  # the protocol never had the connection: its count is ours
                slot.release()
        except BaseException:  # cancelled (the listener closing): likewise
            if slot is not None:
                slot.release()
            raise

    def close(self) -> None:
        """Stop accepting (connections already made stay; handshakes under way are dropped)."""
        if self._serving:
            self._serving = False
            for sock in self.sockets:
                self._loop.remove_reader(sock.fileno())
                sock.close()
        for task in self.handshakes:
            task.cancel()

    async def wait_closed(self) -> None:
        if self.handshakes:
            await asyncio.gather(*self.handshakes, return_exceptions=True)


ACCEPT_BATCH = 128
"""Connections accepted per readiness of the listening socket (asyncio accepts ``backlog``)."""
ACCEPT_RETRY_S = 1.0
"""How long accepting pauses when the process is out of descriptors (asyncio's own delay)."""
ACCEPT_PAUSE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _hint(exc: BaseException) -> str:
    reason = _reason(exc).upper()
    if "WRONG_VERSION_NUMBER" in reason or "HTTP_REQUEST" in reason or "UNKNOWN_PROTOCOL" in reason:
        return " (the client is not speaking TLS: a plaintext client on a TLS port?)"
    if isinstance(exc, ConnectionAbortedError) or "TAKING LONGER" in reason:
        return " (no TLS handshake in time)"
    if "CERTIFICATE" in reason:
        return " (client certificate refused)"
    return ""
