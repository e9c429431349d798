"""SASL on the Kafka listener: SaslHandshake v1 + SaslAuthenticate (KIP-152), PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER, re-authentication (KIP-368), and pass-through to a broker that
authenticates its own clients (docs/security.md, "Authentication").

A connection on a SASL_PLAINTEXT or SASL_SSL listener has a :class:`SaslSession`. Until it has
authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are read: any other request
closes the connection (Kafka: ILLEGAL_SASL_STATE), and a frame larger than
``sasl.server.max.receive.size`` (512 KiB) too. ApiVersions: once before the handshake (again
after an unsupported version only), never during an exchange (:func:`_api_versions`). The exchange, as Kafka's SaslServerAuthenticator:

* SaslHandshake names the mechanism: unknown or not enabled -> UNSUPPORTED_SASL_MECHANISM (33)
  with the enabled ones, connection closed. Every refusal of the exchange is answered after
  ``connection.failed.authentication.delay.ms``, as Kafka's KafkaChannel delays them all. SaslAuthenticate before it, or a second handshake
  in the middle of an exchange -> ILLEGAL_SASL_STATE (34), closed.
* SaslAuthenticate carries the mechanism's messages. Bad credentials -> SASL_AUTHENTICATION_FAILED
  (58) with a message, sent after ``connection.failed.authentication.delay.ms`` (100 ms), then
  the connection is closed.
* Success sets the connection's principal (``User:<name>``): every request read after it carries
  it. The last SaslAuthenticate answer (v1+) says the session's lifetime: the token's remaining
  lifetime and ``connections.max.reauth.ms``, the smaller (0: none). Once it has passed, any
  request but SaslHandshake closes the connection; a client re-authenticates with a new
  SaslHandshake + SaslAuthenticate on the same connection, with the same mechanism and as the
  same principal. Another principal: SASL_AUTHENTICATION_FAILED with a message, closed. Another
  enabled mechanism: the handshake is answered without error and the SaslAuthenticate after it
  is not answered, the connection closed after the failure delay (Kafka's
  SaslServerAuthenticator, REAUTH_BAD_MECHANISM). A SaslHandshake that begins no re-authentication (the
  session has no lifetime, or its last re-authentication began under a second ago) and a
  SaslAuthenticate outside an exchange are answered ILLEGAL_SASL_STATE on an authenticated
  connection, which stays open (Kafka's ``KafkaApis``).

Mechanisms (servers are sans-IO: bytes in, bytes out):

* PLAIN (RFC 4616): ``authzid NUL user NUL password``; the password is checked against the
  user's SCRAM credential (``kip848 users``): it is salted with the stored salt and iterations
  and compared with the stored key, so no password is ever stored.
* SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer: ``n,,`` GS2 header (no
  channel binding), authzid empty or the user, the stored iteration count at least 4096;
  ``tokenauth`` (delegation tokens) is refused. The math is ``coordinator.security.scram``'s.
* OAUTHBEARER (RFC 7628, KIP-255): ``n,[a=authzid],^Aauth=Bearer <JWT>^A...^A^A``; the JWT is
  checked by ``oauth.TokenValidator``. A bad token gets the JSON error challenge, then (after
  the client's ``^A``) SASL_AUTHENTICATION_FAILED, as Kafka answers.

Pass-through (``kafka.upstream.sasl.passthrough=true``): the handshake and every SaslAuthenticate
are forwarded, unchanged, on the client connection's own upstream connection, and the broker's
answers relayed; the client is authenticated when the broker says so, its principal taken from
the exchange (PLAIN's user, SCRAM's ``n=``, OAUTHBEARER's principal claim — no signature check:
the broker checked it). Nothing else is forwarded before that, so no request reaches the broker
on a connection authenticated as somebody else.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.core.errors import ErrorCode
from coordinator.security import scram
from coordinator.security.principal import KafkaPrincipal, user

from ..oauth import InvalidToken, TokenValidator
from . import wire
from .apis import API_VERSIONS_RANGE
from .upstream.interfaces import ClientConnection, Forwarder

log = logging.getLogger("kip848.kafka")
API_VERSIONS = 18

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSIONS = (1, 1)
"""SaslHandshake v1 only: v0's raw tokens without Kafka framing are gone in Kafka 4 (KIP-896)."""
AUTHENTICATE_VERSIONS = (0, 2)
MAX_RECEIVE_BYTES = 512 * 1024
"""Kafka's ``sasl.server.max.receive.size``: the largest frame before authentication."""
FAILED_AUTHENTICATION_DELAY_MS = 100
"""Kafka's ``connection.failed.authentication.delay.ms``."""
FAILED = "Authentication failed: Invalid username or password"
MIN_REAUTH_INTERVAL_MS = 1000
"""Kafka's KafkaChannel: a connection re-authenticates at most once a second."""
AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"
SASL_APIS = {SASL_HANDSHAKE: HANDSHAKE_VERSIONS, SASL_AUTHENTICATE: AUTHENTICATE_VERSIONS}
"""The SASL APIs and their versions: a SASL listener serves them; a coordinator-only listener
without SASL advertises them and answers ILLEGAL_SASL_STATE, as a Kafka broker does."""

CredentialLookup = Callable[[str, scram.ScramMechanism], "scram.ScramCredential | None"]


class SaslFailure(Exception):
    """The exchange fails with ``code`` (SASL_AUTHENTICATION_FAILED, ...) and ``message``; the
    connection is closed after the answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Step:
    """A mechanism's answer to one client message: the bytes to send back, and once the
    exchange is complete the principal's name and (tokens) when the credential expires."""

    challenge: bytes = b""
    done: bool = False
    name: str | None = None
    expires_ms: int | None = None


def _failed(mechanism: str) -> SaslFailure:
    return SaslFailure(
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}",
    )


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, lookup: CredentialLookup) -> None:
        self.lookup = lookup

    def step(self, data: bytes, now_ms: int) -> Step:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Invalid SASL/PLAIN response: expected 3 tokens (authzid NUL user NUL password)",
            )
        try:
            authzid, name, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise _failed(self.mechanism) from None
        if not name or not password:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: username and password must not be empty",
            )
        if authzid and authzid != name:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
            )
        if not check_password(self.lookup, name, password):
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED)
        return Step(done=True, name=name)


def check_password(lookup: CredentialLookup, name: str, password: str) -> bool:
    """``password`` matches a SCRAM credential stored for ``name`` (either mechanism)."""
    matched = False
    for mechanism in scram.ScramMechanism:
        credential = lookup(name, mechanism)
        if credential is None:
            continue
        candidate = scram.credential_from_password(
            mechanism, password, credential.salt, credential.iterations
        )
        matched |= hmac.compare_digest(candidate.stored_key, credential.stored_key)
    return matched


_CLIENT_FIRST = re.compile(
    r"^n,(?:a=(?P<authzid>[^,]*))?,n=(?P<name>[^,]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<extensions>(?:,[A-Za-z]+=[^,]*)*)$"
)
_CLIENT_FINAL = re.compile(
    r"^c=(?P<binding>[A-Za-z0-9+/=]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z]+=[^,]*)*?,p=(?P<proof>[A-Za-z0-9+/=]+)$"
)


class ScramServer:
    """One SCRAM exchange (client-first -> server-first, client-final -> server-final)."""

    def __init__(
        self,
        mechanism: scram.ScramMechanism,
        lookup: CredentialLookup,
        server_nonce: str | None = None,
    ) -> None:
        self.scram = mechanism
        self.mechanism = mechanism.mechanism_name
        self.lookup = lookup
        self.server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.stage = 0
        self.name = ""
        self.gs2_header = ""
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""
        self.credential: scram.ScramCredential | None = None

    def step(self, data: bytes, now_ms: int) -> Step:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise _failed(self.mechanism) from None
        if self.stage == 0:
            return self._client_first(text)
        if self.stage == 1:
            return self._client_final(text)
        raise SaslFailure(ErrorCode.ILLEGAL_SASL_STATE, "The SCRAM exchange is already complete")

    def _client_first(self, text: str) -> Step:
        match = _CLIENT_FIRST.match(text)
        if match is None:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Invalid SCRAM client first message (expected n,,n=<user>,r=<nonce>: channel "
                "binding is not supported)",
            )
        try:
            name = scram.username_of(match["name"])
        except ValueError as exc:
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None
        authzid = match["authzid"]
        if authzid and authzid != name:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
            )
        extensions = dict(
            item.split("=", 1) for item in match["extensions"].split(",") if "=" in item
        )
        if extensions.get("tokenauth", "false").lower() == "true":
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: delegation tokens are not supported",
            )
        credential = self.lookup(name, self.scram)
        if credential is None:
            raise _failed(self.mechanism)
        if credential.iterations < scram.MIN_ITERATIONS:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"Iterations {credential.iterations} is less than the minimum "
                f"{scram.MIN_ITERATIONS} for {self.mechanism}",
            )
        self.name = name
        self.credential = credential
        self.gs2_header = text[: text.index(",", 2) + 1]
        self.client_first_bare = text[len(self.gs2_header) :]
        self.nonce = match["nonce"] + self.server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={credential.iterations}"
        self.stage = 1
        return Step(self.server_first.encode())

    def _client_final(self, text: str) -> Step:
        self.stage = 2
        match = _CLIENT_FINAL.match(text)
        if match is None:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED, "Invalid SCRAM client final message"
            )
        try:
            binding = base64.b64decode(match["binding"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except (binascii.Error, ValueError):
            raise _failed(self.mechanism) from None
        if match["nonce"] != self.nonce:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED, "Invalid SCRAM nonce in client final"
            )
        if binding != self.gs2_header.encode():
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, "Invalid SCRAM channel binding")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        credential = self.credential
        assert credential is not None
        if not scram.verify_client_proof(self.scram, credential, auth_message, proof):
            raise _failed(self.mechanism)
        signature = scram.server_signature(self.scram, credential, auth_message)
        return Step(b"v=" + base64.b64encode(signature), done=True, name=self.name)


_OAUTH_FIRST = re.compile(rb"^n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<pairs>.*)\x01\x01$", re.S)
OAUTH_INVALID = json.dumps({"status": "invalid_token"}).encode()


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: TokenValidator) -> None:
        self.validator = validator
        self.refused: str | None = None  # a bad token: its reason, told after the client's ^A

    def step(self, data: bytes, now_ms: int) -> Step:
        if self.refused is not None:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism OAUTHBEARER: {self.refused}",
            )
        match = _OAUTH_FIRST.match(data)
        if match is None:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Invalid OAUTHBEARER initial client response",
            )
        pairs: dict[bytes, bytes] = {}
        for item in match["pairs"].split(b"\x01"):
            key, sep, value = item.partition(b"=")
            if not sep:
                raise SaslFailure(
                    ErrorCode.SASL_AUTHENTICATION_FAILED,
                    "Invalid OAUTHBEARER initial client response (key=value pairs)",
                )
            pairs[key] = value
        auth = pairs.get(b"auth", b"")
        if not auth.lower().startswith(b"bearer "):
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Invalid OAUTHBEARER initial client response: no auth=Bearer <token>",
            )
        token = auth[len(b"bearer ") :].strip().decode("ascii", "replace")
        try:
            valid = self.validator.validate(token, now_ms / 1000)
        except InvalidToken as exc:
            self.refused = str(exc)
            return Step(OAUTH_INVALID)  # the error challenge; the client answers ^A
        authzid = match["authzid"]
        if authzid and authzid.decode("utf-8", "replace") != valid.principal_name:
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: the authorization id does not match the token's principal",
            )
        return Step(done=True, name=valid.principal_name, expires_ms=valid.expires_ms)


@dataclass(slots=True, kw_only=True)
class Authenticator:
    """A SASL listener's authentication (see the module doc): what each connection's
    :class:`SaslSession` uses. ``lookup``: the SCRAM credentials (the service layer's
    ``scram_credential``); ``tokens``: OAUTHBEARER; ``passthrough``: relay to the upstream
    (``sub_claim``: where its OAUTHBEARER principal is read)."""

    mechanisms: tuple[str, ...]
    lookup: CredentialLookup | None = None
    tokens: TokenValidator | None = None
    reauth_ms: int = 0
    passthrough: bool = False
    sub_claim: str = "sub"
    failure_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS

    def server(self, mechanism: str) -> Any:
        if mechanism == "PLAIN":
            assert self.lookup is not None
            return PlainServer(self.lookup)
        if mechanism.startswith("SCRAM-"):
            assert self.lookup is not None
            return ScramServer(scram.ScramMechanism.of(mechanism), self.lookup)
        assert self.tokens is not None
        return OAuthBearerServer(self.tokens)


# Session states.
NEED_HANDSHAKE, NEED_AUTHENTICATE, AUTHENTICATED = "handshake", "authenticate", "authenticated"


class SaslSession:
    """One connection's SASL state (sans-IO: the listener sends and closes)."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator
        self.state = NEED_HANDSHAKE
        self.mechanism: str | None = None
        self.server: Any = None
        self.principal: KafkaPrincipal | None = None  # once authenticated (kept on re-auth)
        self.expires_at_ms: int | None = None  # the session's end (KIP-368); None: no end
        self.reauthenticating = False
        self.reauth_started_ms: int | None = None  # the last re-authentication's start
        self.steps = 0  # pass-through: SaslAuthenticate answers received
        self.pending_name: str | None = None  # pass-through: who the exchange is for
        self.closing = False  # refused: the connection closes once the answer is out
        self.versions_answered = False  # an ApiVersions was answered before the handshake
        self.failures = 0
        self.bad_mechanism: str | None = None
        """A re-authentication's handshake named another mechanism than the session's: why its
        SaslAuthenticate fails (Kafka's REAUTH_BAD_MECHANISM)."""

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def may_reauthenticate(self, now_ms: int) -> bool:
        """Whether a SaslHandshake now begins a re-authentication (KIP-368), as Kafka's
        ``KafkaChannel.maybeBeginServerReauthentication``: only a session with a lifetime, and
        not within a second of the last re-authentication's start. Otherwise the handshake is an
        ordinary request of an authenticated connection (see :func:`_serve`)."""
        if self.state != AUTHENTICATED or self.expires_at_ms is None:
            return False
        last = self.reauth_started_ms
        return last is None or now_ms - last >= MIN_REAUTH_INTERVAL_MS

    def handshake(self, mechanism: str) -> tuple[ErrorCode, str]:
        """A SaslHandshake: NONE, or the error and its message (the connection then closes)."""
        enabled = self.authenticator.mechanisms
        if self.state == NEED_AUTHENTICATE:
            return ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake in the middle of an exchange"
        if mechanism not in enabled:
            return (
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"Unsupported SASL mechanism {mechanism}; enabled: {', '.join(enabled)}",
            )
        self.reauthenticating = self.authenticated
        self.state = NEED_AUTHENTICATE
        self.steps = 0
        if self.authenticated and mechanism != self.mechanism:
            # Kafka's SaslServerAuthenticator (REAUTH_BAD_MECHANISM): the handshake of a
            # re-authentication with another enabled mechanism is answered without error; the
            # re-authentication fails at the SaslAuthenticate that follows (:meth:`authenticate`).
            self.bad_mechanism = (
                f"re-authentication with SASL mechanism {mechanism} of a session authenticated "
                f"with {self.mechanism}: only the session's mechanism may re-authenticate it"
            )
            self.server = None
            return ErrorCode.NONE, ""
        self.bad_mechanism = None
        self.mechanism = mechanism
        if not self.authenticator.passthrough:
            self.server = self.authenticator.server(mechanism)
        return ErrorCode.NONE, ""

    def authenticate(self, data: bytes, now_ms: int) -> tuple[bytes, int | None]:
        """A SaslAuthenticate: the bytes to answer, and once complete the session's lifetime in
        ms (0: none); :class:`SaslFailure` if refused."""
        if self.state != NEED_AUTHENTICATE:
            raise SaslFailure(
                ErrorCode.ILLEGAL_SASL_STATE,
                "Unexpected SaslAuthenticate: no SaslHandshake before it",
            )
        if self.bad_mechanism is not None:
            self.state = NEED_HANDSHAKE
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, self.bad_mechanism)
        try:
            step = self.server.step(data, now_ms)
        except SaslFailure:
            self.state = NEED_HANDSHAKE
            raise
        if not step.done:
            return step.challenge, None
        assert step.name is not None
        return step.challenge, self.complete(user(step.name), step.expires_ms, now_ms)

    def complete(self, principal: KafkaPrincipal, expires_ms: int | None, now_ms: int) -> int:
        """The exchange succeeded as ``principal``: the session's lifetime (0: none)."""
        if self.reauthenticating and principal != self.principal:
            self.state = NEED_HANDSHAKE
            raise SaslFailure(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"Re-authentication as {principal} on a connection authenticated as "
                f"{self.principal} is not allowed",
            )
        self.principal = principal
        self.state = AUTHENTICATED
        self.server = None
        lifetime = session_lifetime_ms(self.authenticator.reauth_ms, expires_ms, now_ms)
        self.expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        return lifetime


def session_lifetime_ms(reauth_ms: int, expires_ms: int | None, now_ms: int) -> int:
    """KIP-368 as Kafka's SaslServerAuthenticator computes it: the credential's remaining
    lifetime (a token's ``exp``; at least 1 ms), bounded by ``connections.max.reauth.ms`` when
    that is set — a session never outlives its token, re-authentication configured or not;
    ``connections.max.reauth.ms`` alone for a credential without an end (SCRAM, PLAIN); 0 (no
    end) when neither applies."""
    if expires_ms is None:
        return max(0, reauth_ms)
    remaining = max(1, expires_ms - now_ms)
    return remaining if reauth_ms <= 0 else min(reauth_ms, remaining)


def passthrough_principal(mechanism: str, message: bytes, sub_claim: str) -> str | None:
    """The principal's name in a client's first SASL message (pass-through: the broker checks
    the credentials, we read who they are for). None if it cannot be read."""
    try:
        if mechanism == "PLAIN":
            parts = message.split(b"\0")
            return parts[1].decode("utf-8") if len(parts) == 3 and parts[1] else None
        if mechanism.startswith("SCRAM-"):
            match = _CLIENT_FIRST.match(message.decode("utf-8"))
            return None if match is None else scram.username_of(match["name"])
        match_oauth = _OAUTH_FIRST.match(message)
        if match_oauth is None:
            return None
        for item in match_oauth["pairs"].split(b"\x01"):
            key, _sep, value = item.partition(b"=")
            if key == b"auth" and value.lower().startswith(b"bearer "):
                token = value[len(b"bearer ") :].strip().decode("ascii")
                import jwt

                claims = jwt.decode(token, options={"verify_signature": False})
                name = claims.get(sub_claim)
                return name if isinstance(name, str) and name else None
    except (UnicodeDecodeError, ValueError, Exception):  # noqa: BLE001 - unreadable: refused
        return None
    return None


PASSTHROUGH_STEPS = {"PLAIN": 1, "OAUTHBEARER": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}
"""How many successful SaslAuthenticate answers complete an exchange (pass-through)."""


# ---------------------------------------------------------------- the connection's side


class SaslListener(Protocol):
    """The Kafka listener, as the SASL gate sees it."""

    @property
    def upstream(self) -> Forwarder | None:
        """The upstream broker (pass-through relays the exchange to it); None: no upstream."""

    @property
    def on_auth_failed(self) -> Callable[[str, str, str, str], None] | None:
        """Called with (listener, mechanism, peer, reason) for each client refused."""


class SaslConnection(ClientConnection, Protocol):
    """A client connection on a SASL listener, as the gate sees it
    (``listener.KafkaConnection``): its session, its answer order (``expect``/``complete``,
    and its upstream connection for pass-through, from :class:`ClientConnection`), its
    principal, and closing it."""

    sasl: SaslSession | None
    """The exchange's state (None on a listener without SASL)."""

    @property
    def listener(self) -> SaslListener:
        """The listener it came through."""

    @property
    def peer(self) -> str:
        """The client's address (for the log)."""

    @property
    def closed(self) -> bool:
        """Whether it is closed."""

    def set_principal(self, principal: KafkaPrincipal) -> None:
        """The requests read from now on carry ``principal``."""

    def close_when_drained(self) -> None:
        """Close once the answers in its order are written."""


def now_ms() -> int:
    """Wall-clock milliseconds: token expiries (``exp``) are wall-clock times."""
    return int(time.time() * 1000)


def intercept(
    conn: SaslConnection, key: int, version: int, correlation_id: int, frame: bytes, pos: int
) -> bool:
    """Called for every request of a connection on a SASL listener before anything else reads
    it: True when this module took care of it (a SASL request, or a request refused because the
    connection has not authenticated or its session expired), False to serve it as usual."""
    session = conn.sasl
    assert session is not None
    if session.closing:
        return True  # an authentication failed: nothing more is read
    if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
        _serve(conn, session, key, version, correlation_id, frame, pos)
        return True
    if session.authenticated and session.expired(now_ms()):
        # Any request but a re-authentication closes an expired session, ApiVersions
        # included (Kafka's SocketServer: only a SaslHandshake may begin one).
        conn.fail(
            "its SASL session expired (connections.max.reauth.ms) and it did not re-authenticate"
        )
        return True
    if key == API_VERSIONS:
        return _api_versions(conn, session, version, correlation_id)
    if not session.authenticated:
        why = (
            f"{wire.api_name(key)} before SASL authentication (ILLEGAL_SASL_STATE: only "
            "ApiVersions, SaslHandshake and SaslAuthenticate are accepted first)"
        )
        _observe(conn, "none", why)
        conn.fail(why)
        return True
    if session.state == NEED_AUTHENTICATE:
        conn.fail(f"{wire.api_name(key)} in the middle of a SASL re-authentication")
        return True
    return False


def _api_versions(
    conn: SaslConnection, session: SaslSession, version: int, correlation_id: int
) -> bool:
    """An ApiVersions on a SASL connection, as Kafka's SaslServerAuthenticator reads it: before
    the handshake one is answered as usual (again only after an error answer, UNSUPPORTED_VERSION
    or INVALID_REQUEST: a second one closes the connection); between the handshake and the exchange's end (also of a
    re-authentication) it is answered ILLEGAL_SASL_STATE with no API keys and the connection
    is closed; once authenticated it is answered as usual. True when it was taken care of."""
    if session.state == NEED_AUTHENTICATE:
        answer = wire.build(
            wire.response_class(API_VERSIONS, version if _versions_ok(version) else 0),
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            api_keys=[],
            throttle_time=0,
        )
        data = wire.frame_raw(correlation_id, False, wire.encode_body(answer))
        why = "ApiVersions during the SASL exchange (ILLEGAL_SASL_STATE)"
        _refuse_later(conn, session, conn.expect(), data, why)
        return True
    if not session.authenticated and session.versions_answered:
        why = "a second ApiVersions before the SaslHandshake"
        _observe(conn, "none", why)
        conn.fail(why)
        return True
    return False  # answered by the listener, which marks ``versions_answered``


def _versions_ok(version: int) -> bool:
    lo, hi = API_VERSIONS_RANGE
    return lo <= version <= hi


def _serve(
    conn: SaslConnection,
    session: SaslSession,
    key: int,
    version: int,
    correlation_id: int,
    frame: bytes,
    pos: int,
) -> None:
    lo, hi = HANDSHAKE_VERSIONS if key == SASL_HANDSHAKE else AUTHENTICATE_VERSIONS
    if not lo <= version <= hi:
        conn.fail(f"{wire.api_name(key)} v{version} is not supported (v{lo}-v{hi})")
        return
    try:
        entity = wire.decode(key, version, frame, wire.body_offset(frame, key, version, pos))
    except wire.WireError as exc:
        conn.fail(str(exc))
        return
    if session.state == AUTHENTICATED:
        now = now_ms()
        if key == SASL_HANDSHAKE and session.may_reauthenticate(now):
            session.reauth_started_ms = now  # a re-authentication begins
        elif session.expired(now):
            conn.fail(
                "its SASL session expired (connections.max.reauth.ms) and it did not "
                "re-authenticate"
            )
            return
        else:
            # Kafka's KafkaApis answers these of an authenticated connection in-band and keeps
            # it: nothing is refused, no credential was tried.
            conn.complete(conn.expect(), illegal_sasl_state(key, version, correlation_id))
            return
    if (
        key == SASL_AUTHENTICATE
        and session.bad_mechanism is not None
        and session.state == NEED_AUTHENTICATE
    ):
        # Kafka fails such a re-authentication here, without an answer: the connection is
        # closed after connection.failed.authentication.delay.ms (the client reconnects and
        # authenticates afresh, with its mechanism).
        _refused(conn, session, session.bad_mechanism, close=False)
        delay = session.authenticator.failure_delay_ms / 1000
        asyncio.get_running_loop().call_later(delay, conn.close_when_drained)
        return
    slot = conn.expect()
    authenticator = session.authenticator
    upstream = conn.listener.upstream
    if key == SASL_HANDSHAKE:
        mechanism = str(entity.mechanism)
        code, message = session.handshake(mechanism)
        if (
            code == ErrorCode.NONE
            and authenticator.passthrough
            and upstream is not None
            and session.bad_mechanism is None
        ):
            _relay(conn, session, slot, key, version, frame, None)
            return
        answer = wire.build(
            wire.response_class(key, version),
            error_code=code,
            mechanisms=list(authenticator.mechanisms),
        )
        data = wire.frame(key, version, correlation_id, answer)
        if code != ErrorCode.NONE:
            _refuse_later(conn, session, slot, data, f"SaslHandshake {mechanism}: {message}")
        else:
            conn.complete(slot, data)
        return
    auth_bytes = bytes(entity.auth_bytes)
    if authenticator.passthrough and upstream is not None:
        if session.state != NEED_AUTHENTICATE:
            _fail(conn, session, slot, version, correlation_id, _no_handshake())
            return
        if session.steps == 0:
            assert session.mechanism is not None
            session.pending_name = passthrough_principal(
                session.mechanism, auth_bytes, authenticator.sub_claim
            )
        _relay(conn, session, slot, key, version, frame, correlation_id)
        return
    now = now_ms()
    try:
        challenge, lifetime = session.authenticate(auth_bytes, now)
    except SaslFailure as failure:
        _fail(conn, session, slot, version, correlation_id, failure)
        return
    if lifetime is not None:
        assert session.principal is not None
        conn.set_principal(session.principal)
    answer = wire.build(
        wire.response_class(key, version),
        error_code=ErrorCode.NONE,
        error_message=None,
        auth_bytes=challenge,
        session_lifetime=lifetime or 0,
    )
    conn.complete(slot, wire.frame(key, version, correlation_id, answer))


def illegal_sasl_state(key: int, version: int, correlation_id: int) -> bytes:
    """ILLEGAL_SASL_STATE for a SaslHandshake that begins no re-authentication, or a
    SaslAuthenticate outside an exchange, on an authenticated connection — or either of them
    on a listener without SASL (Kafka's ``KafkaApis.handleSaslHandshakeRequest`` /
    ``handleSaslAuthenticateRequest``, which answer them so wherever they reach it)."""
    cls = wire.response_class(key, version)
    if key == SASL_HANDSHAKE:
        answer = wire.build(cls, error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    else:
        answer = wire.build(
            cls,
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message=AFTER_AUTHENTICATION,
            auth_bytes=b"",
            session_lifetime=0,
        )
    return wire.frame(key, version, correlation_id, answer)


def _no_handshake() -> SaslFailure:
    return SaslFailure(
        ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate: no SaslHandshake before it"
    )


def _fail(
    conn: SaslConnection,
    session: SaslSession,
    slot: object,
    version: int,
    correlation_id: int,
    failure: SaslFailure,
) -> None:
    """Answer a refused SaslAuthenticate after ``connection.failed.authentication.delay.ms``
    (Kafka's brake on guessing), then close."""
    answer = wire.build(
        wire.response_class(SASL_AUTHENTICATE, version),
        error_code=failure.code,
        error_message=failure.message,
        auth_bytes=b"",
        session_lifetime=0,
    )
    data = wire.frame(SASL_AUTHENTICATE, version, correlation_id, answer)
    _refuse_later(conn, session, slot, data, failure.message)


def _refuse_later(
    conn: SaslConnection, session: SaslSession, slot: object, data: bytes, why: str
) -> None:
    """A refusal of the exchange (any of its requests: Kafka's KafkaChannel delays every
    authentication failure): answered after ``connection.failed.authentication.delay.ms``,
    then the connection is closed."""
    _refused(conn, session, why)
    delay = session.authenticator.failure_delay_ms / 1000
    asyncio.get_running_loop().call_later(delay, _answer_and_close, conn, slot, data)


def _answer_and_close(conn: SaslConnection, slot: object, data: bytes) -> None:
    if not conn.closed:
        conn.complete(slot, data)
        conn.close_when_drained()


def _refused(conn: SaslConnection, session: SaslSession, why: str, close: bool = True) -> None:
    session.closing = True
    session.failures += 1
    log.info("Failed authentication with %s (%s): %s", conn.peer, session.mechanism, why)
    _observe(conn, session.mechanism or "none", why)
    if close:
        conn.close_when_drained()


def _observe(conn: SaslConnection, mechanism: str, why: str) -> None:
    on_failed = conn.listener.on_auth_failed
    if on_failed is not None:
        on_failed("kafka", mechanism, conn.peer, why)


def _relay(
    conn: SaslConnection,
    session: SaslSession,
    slot: object,
    key: int,
    version: int,
    frame: bytes,
    correlation_id: int | None,
) -> None:
    """Pass-through: forward the request on the connection's own upstream connection, relay
    the broker's answer, and follow the exchange in it."""
    upstream = conn.listener.upstream
    assert upstream is not None
    future = upstream.forward_future(conn, key, version, frame)

    def answered(done: asyncio.Future[bytes]) -> None:
        if done.cancelled() or done.exception() is not None or conn.closed:
            return
        reply = done.result()
        _relayed(conn, session, slot, key, version, reply)

    future.add_done_callback(answered)


def _relayed(
    conn: SaslConnection, session: SaslSession, slot: object, key: int, version: int, reply: bytes
) -> None:
    flexible = wire.response_header_flexible(key, version)
    try:
        resp = wire.decode_response(key, version, reply, 4 + (1 if flexible else 0))
    except wire.WireError as exc:
        conn.fail(f"unreadable SASL answer from the upstream broker: {exc}")
        return
    conn.complete(slot, wire.I32.pack(len(reply)) + reply)
    code = int(resp.error_code)
    if code != ErrorCode.NONE:
        session.state = NEED_HANDSHAKE
        message = getattr(resp, "error_message", None) or ErrorCode(code).name
        _refused(conn, session, f"the upstream broker refused it: {message}")
        return
    if key == SASL_HANDSHAKE:
        return
    session.steps += 1
    assert session.mechanism is not None
    if session.steps < PASSTHROUGH_STEPS.get(session.mechanism, 1):
        return
    name = session.pending_name
    if name is None:
        conn.fail("the upstream accepted a SASL exchange whose principal cannot be read")
        return
    lifetime_ms = wire.to_ms(getattr(resp, "session_lifetime", None))
    now = now_ms()
    try:
        # The broker's lifetime is the session's: expired, it would refuse the connection too.
        session.complete(user(name), now + lifetime_ms if lifetime_ms > 0 else None, now)
    except SaslFailure as failure:
        _refused(conn, session, failure.message)
        return
    session.expires_at_ms = now + lifetime_ms if lifetime_ms > 0 else None
    assert session.principal is not None
    conn.set_principal(session.principal)
