"""The coordinator's own SASL sign-in to the upstream broker (PLAIN, SCRAM-SHA-256/512), on its
own connections only (topic feed, log offsets, topic administration): SaslHandshake v1, then
SaslAuthenticate. SCRAM uses ``coordinator.security.scram`` and checks the broker's signature
(a broker that does not know the password cannot pass as the real one)."""

from __future__ import annotations

import base64
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.security import scram

from .. import wire

Request = Callable[[Any], Awaitable[Any]]
_SERVER_FIRST = re.compile(r"^r=(?P<nonce>[^,]+),s=(?P<salt>[^,]+),i=(?P<iterations>\d+)(,.*)?$")


class SignInRefused(Exception):
    """The broker refused the sign-in (its error and message), or answered nonsense."""


async def _authenticate(request: Request, data: bytes) -> tuple[bytes, int]:
    resp = await request(wire.build(wire.request_class(36, 1), auth_bytes=data))
    if int(resp.error_code):
        message = resp.error_message or f"error {int(resp.error_code)}"
        raise SignInRefused(message)
    return bytes(resp.auth_bytes), wire.to_ms(getattr(resp, "session_lifetime", None))


async def sign_in(request: Request, mechanism: str, username: str, password: str) -> int:
    """Authenticate the connection ``request`` sends on; the session lifetime (ms, 0: none)."""
    handshake = await request(wire.build(wire.request_class(17, 1), mechanism=mechanism))
    if int(handshake.error_code):
        raise SignInRefused(
            f"mechanism {mechanism} not enabled (the broker offers "
            f"{', '.join(handshake.mechanisms or ()) or 'none'})"
        )
    if mechanism == "PLAIN":
        _reply, lifetime = await _authenticate(
            request, b"\0" + username.encode() + b"\0" + password.encode()
        )
        return lifetime
    kind = scram.ScramMechanism.of(mechanism)
    nonce = secrets.token_urlsafe(24)
    first_bare = f"n={scram.sasl_name(username)},r={nonce}"
    reply, _lifetime = await _authenticate(request, f"n,,{first_bare}".encode())
    server_first = reply.decode("utf-8", "replace")
    match = _SERVER_FIRST.match(server_first)
    if match is None or not match["nonce"].startswith(nonce):
        raise SignInRefused("the broker's SCRAM server-first message is invalid")
    salt = base64.b64decode(match["salt"])
    iterations = int(match["iterations"])
    if not scram.MIN_ITERATIONS <= iterations <= 10 * scram.MAX_ITERATIONS:
        raise SignInRefused(f"the broker asks for {iterations} SCRAM iterations")
    salted = scram.salted_password(kind, password, salt, iterations)
    without_proof = f"c=biws,r={match['nonce']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = base64.b64encode(scram.client_proof(kind, salted, auth_message)).decode()
    final, lifetime = await _authenticate(request, f"{without_proof},p={proof}".encode())
    credential = scram.credential_from_salted_password(kind, salt, salted, iterations)
    expected = b"v=" + base64.b64encode(scram.server_signature(kind, credential, auth_message))
    if not hmac.compare_digest(final.split(b",")[0], expected):
        raise SignInRefused("the broker's SCRAM signature is wrong (not the real broker?)")
    return lifetime
