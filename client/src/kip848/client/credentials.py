"""TLS and bearer tokens for the client (docs/client.md, "Security").

* :func:`tls_credentials` — TLS to the coordinator: the CA certificates its certificate must
  chain to (None: the system's), and a client certificate for mutual TLS.
* ``GroupMember(token=...)`` sends ``authorization: Bearer <JWT>`` with every call: a string,
  or a function giving the current token, such as :func:`token_file` (re-read when the file
  changes, for tokens an agent renews). A token is never sent without TLS unless you give one
  to a plaintext channel yourself.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

import grpc


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as fp:
        return fp.read()


def tls_credentials(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials:
    """Channel credentials for TLS: ``ca_file`` (PEM CAs; None: the system's), and for mutual
    TLS ``cert_file`` (PEM chain; it may hold the key) with ``key_file`` (PEM key, if apart).

    Raises :class:`OSError` for a file that cannot be read and :class:`ValueError` for one
    that is not what it should be — a CA file with no PEM certificate, a certificate or key
    that does not parse, an encrypted key, a key that is not the certificate's — at once,
    rather than as a failed handshake on every call."""
    _check_pem(ca_file, cert_file, key_file)
    chain = _read(cert_file)
    key = _read(key_file) if key_file is not None else chain
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=key if chain is not None else None,
        certificate_chain=chain,
    )


def _check_pem(ca_file: str | None, cert_file: str | None, key_file: str | None) -> None:
    """The files parsed as gRPC's TLS would take them (Python's ``ssl``: OpenSSL's PEM rules)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_file is not None:
        _read(ca_file)  # an unreadable file: OSError, as open() gives it
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except ssl.SSLError as exc:
            raise ValueError(f"{ca_file} holds no PEM certificate to trust{_why(exc)}") from None
    if cert_file is None:
        if key_file is not None:
            raise ValueError(f"a private key ({key_file}) was given without its certificate")
        return
    _read(cert_file)
    if key_file is not None:
        _read(key_file)

    def no_password() -> str:
        raise ValueError("encrypted")

    try:
        ctx.load_cert_chain(cert_file, key_file, password=no_password)
    except ValueError:
        raise ValueError(
            f"the private key in {key_file or cert_file} is encrypted: give an unencrypted "
            "PEM key (gRPC reads no encrypted keys)"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(
                f"the private key in {key_file or cert_file} is not the key of the certificate "
                f"in {cert_file}"
            ) from None
        where = f"{cert_file} and {key_file}" if key_file else cert_file
        raise ValueError(
            f"{where}: not a PEM certificate chain with its private key (the key may be in the "
            f"certificate's file or apart){_why(exc)}"
        ) from None


def _why(exc: ssl.SSLError) -> str:
    return f" ({exc.reason})" if exc.reason else ""


def token_file(path: str) -> Callable[[], str]:
    """A token source reading ``path`` (a JWT, surrounding whitespace ignored), again whenever
    the file changes."""
    cache: list[object] = [None, ""]

    def current() -> str:
        stamp = os.stat(path).st_mtime_ns
        if stamp != cache[0]:
            with open(path, encoding="utf-8") as fp:
                cache[1] = fp.read().strip()
            cache[0] = stamp
        return str(cache[1])

    return current
