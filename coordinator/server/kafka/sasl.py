"""SASL on the Kafka listener: SaslHandshake v1 + SaslAuthenticate (KIP-152), PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER, re-authentication (KIP-368), and pass-through to a broker that
authenticates its own clients (docs/security.md, "Authentication").

A connection on a SASL_PLAINTEXT or SASL_SSL listener has a :class:`SaslSession`. Until it has
authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are read: any other request
closes the connection (Kafka: ILLEGAL_SASL_STATE), and a frame larger than
``sasl.server.max.receive.size`` (512 KiB) too. ApiVersions: once before the handshake (again
after an unsupported version only), never during an exchange. This module holds the sessions
and the mechanisms (sans-IO); what a connection does with them — reading, answering, refusing,
relaying — is ``sasl_gate``'s. The exchange, as Kafka's SaslServerAuthenticator:

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
  and compared with the stored key, so no password is ever stored. That derivation runs off
  the event loop (``sasl_checks``); the connection reads nothing more until it is decided.
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

import base64
import binascii
import json
import logging
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.core.errors import ErrorCode
from coordinator.security import scram
from coordinator.security.principal import KafkaPrincipal, user

from ..oauth import InvalidToken, TokenValidator
from .sasl_checks import CredentialLookup, password_check

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
    check: Callable[[], bool] | None = None
    """What must hold before the exchange is complete, run off the loop (PLAIN's password:
    ``sasl_checks``)."""


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
        check = password_check(self.lookup, name, password)
        if check is None:
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED)
        return Step(done=True, name=name, check=check)


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
        self.checking = False  # a step's check runs off the loop: nothing more is read
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

    def authenticate(self, data: bytes, now_ms: int) -> tuple[bytes, int | None] | Step:
        """A SaslAuthenticate: the bytes to answer, and once complete the session's lifetime in
        ms (0: none); :class:`SaslFailure` if refused. A step with a check to run first (off
        the loop) is returned as it is: its outcome goes to :meth:`checked`."""
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
        if step.check is not None:
            self.checking = True
            return step
        assert step.name is not None
        return step.challenge, self.complete(user(step.name), step.expires_ms, now_ms)

    def checked(self, step: Step, passed: bool, now_ms: int) -> tuple[bytes, int]:
        """The end of an exchange whose last step waited for its check (``passed``: how it
        went), as :meth:`authenticate` ends it."""
        self.checking = False
        if not passed:
            self.state = NEED_HANDSHAKE
            raise SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED)
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
