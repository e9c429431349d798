"""The connection's side of SASL on the Kafka listener (``sasl`` holds the sessions and the
mechanisms, sans-IO): every request of a connection on a SASL listener passes
:func:`intercept` first, which serves SaslHandshake and SaslAuthenticate, refuses what comes
before authentication or after a session expired, answers refusals after
``connection.failed.authentication.delay.ms`` and closes, relays a pass-through exchange to the
broker, and runs PLAIN's password check off the loop (``sasl_checks``), the connection held
meanwhile (:meth:`SaslConnection.read_on` once it is decided)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from coordinator.core.errors import ErrorCode
from coordinator.security.principal import KafkaPrincipal, user

from . import sasl_checks, wire
from .apis import API_VERSIONS_RANGE
from .sasl import (
    AFTER_AUTHENTICATION,
    API_VERSIONS,
    AUTHENTICATE_VERSIONS,
    AUTHENTICATED,
    HANDSHAKE_VERSIONS,
    NEED_AUTHENTICATE,
    NEED_HANDSHAKE,
    PASSTHROUGH_STEPS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslFailure,
    SaslSession,
    Step,
    log,
    passthrough_principal,
)
from .upstream.interfaces import ClientConnection, Forwarder


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

    def read_on(self) -> None:
        """Read on: the frames held while :attr:`SaslSession.checking`."""


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
    try:
        outcome = session.authenticate(auth_bytes, now_ms())
    except SaslFailure as failure:
        _fail(conn, session, slot, version, correlation_id, failure)
        return
    if isinstance(outcome, Step):  # its check runs off the loop; the connection waits
        assert outcome.check is not None
        done = partial(_checked, conn, session, slot, version, correlation_id, outcome)
        sasl_checks.run(outcome.check, done)
        return
    _answer(conn, session, slot, version, correlation_id, *outcome)


def _checked(
    conn: SaslConnection,
    session: SaslSession,
    slot: object,
    version: int,
    correlation_id: int,
    step: Step,
    passed: bool,
) -> None:
    """A SaslAuthenticate's check is done: its answer, then the frames held meanwhile."""
    if conn.closed:
        return
    try:
        challenge, lifetime = session.checked(step, passed, now_ms())
    except SaslFailure as failure:
        _fail(conn, session, slot, version, correlation_id, failure)
        return
    _answer(conn, session, slot, version, correlation_id, challenge, lifetime)
    conn.read_on()


def _answer(
    conn: SaslConnection,
    session: SaslSession,
    slot: object,
    version: int,
    correlation_id: int,
    challenge: bytes,
    lifetime: int | None,
) -> None:
    if lifetime is not None:
        assert session.principal is not None
        conn.set_principal(session.principal)
    answer = wire.build(
        wire.response_class(SASL_AUTHENTICATE, version),
        error_code=ErrorCode.NONE,
        error_message=None,
        auth_bytes=challenge,
        session_lifetime=lifetime or 0,
    )
    conn.complete(slot, wire.frame(SASL_AUTHENTICATE, version, correlation_id, answer))


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
