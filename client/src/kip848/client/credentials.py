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
    TLS ``cert_file`` (PEM chain; it may hold the key) with ``key_file`` (PEM key, if apart)."""
    chain = _read(cert_file)
    key = _read(key_file) if key_file is not None else chain
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=key if chain is not None else None,
        certificate_chain=chain,
    )


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
