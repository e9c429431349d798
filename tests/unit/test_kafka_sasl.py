"""The Kafka listener's SASL servers (sans-IO): PLAIN, SCRAM (checked against scramp, an
independent client), OAUTHBEARER (JWTs against a JWKS file), the session's state machine and
KIP-368 lifetimes. The listener's side is tested end to end in tests/e2e/test_sasl.py, PLAIN's
check off the loop in test_kafka_sasl_off_loop.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import scramp
from jwks import TokenIssuer

from coordinator.core.errors import ErrorCode
from coordinator.security import scram
from coordinator.security.principal import user
from coordinator.server.kafka.sasl import (
    NEED_HANDSHAKE,
    OAUTH_INVALID,
    Authenticator,
    OAuthBearerServer,
    PlainServer,
    SaslFailure,
    SaslSession,
    ScramServer,
    Step,
    passthrough_principal,
    session_lifetime_ms,
)
from coordinator.server.oauth import InvalidToken, TokenValidator
from coordinator.server.security_config import OAuthSettings

SALT = b"0123456789abcdef"
NOW = int(time.time() * 1000)


def store(**passwords: str) -> dict[tuple[str, scram.ScramMechanism], scram.ScramCredential]:
    return {
        (name, mechanism): scram.credential_from_password(mechanism, password, SALT, 4096)
        for name, password in passwords.items()
        for mechanism in scram.ScramMechanism
    }


CREDENTIALS = store(alice="alice-secret", **{"we,ird=name": "pw"})


def lookup(name: str, mechanism: scram.ScramMechanism) -> scram.ScramCredential | None:
    return CREDENTIALS.get((name, mechanism))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("name", ["alice", "we,ird=name"])
def test_scram_exchange_with_an_independent_client(mechanism: str, name: str) -> None:
    password = "alice-secret" if name == "alice" else "pw"
    client = scramp.ScramClient([mechanism], name, password)
    server = ScramServer(scram.ScramMechanism.of(mechanism), lookup)
    first = server.step(client.get_client_first().encode(), NOW)
    assert not first.done
    client.set_server_first(first.challenge.decode())
    final = server.step(client.get_client_final().encode(), NOW)
    assert final.done and final.name == name
    client.set_server_final(final.challenge.decode())  # scramp checks the server's signature


@pytest.mark.parametrize(
    ("name", "password", "message"),
    [
        ("alice", "wrong", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
        ("bob", "x", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ],
)
def test_scram_refuses_wrong_passwords_and_unknown_users(
    name: str, password: str, message: str
) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], name, password)
    server = ScramServer(scram.ScramMechanism.SCRAM_SHA_256, lookup)
    with pytest.raises(SaslFailure) as refused:
        first = server.step(client.get_client_first().encode(), NOW)
        client.set_server_first(first.challenge.decode())
        server.step(client.get_client_final().encode(), NOW)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert message in refused.value.message


@pytest.mark.parametrize(
    "first",
    [
        b"y,,n=alice,r=abc",  # channel binding flags
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,r=abc",
        b"n,a=bob,n=alice,r=abc",  # authzid other than the user
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens
        b"\xff\xfe",
        b"",
        b"n,,n=al=3Fce,r=abc",  # a bad escape
    ],
)
def test_scram_refuses_malformed_first_messages(first: bytes) -> None:
    with pytest.raises(SaslFailure) as refused:
        ScramServer(scram.ScramMechanism.SCRAM_SHA_256, lookup).step(first, NOW)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_scram_final_must_carry_the_nonce_and_binding() -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    server = ScramServer(scram.ScramMechanism.SCRAM_SHA_256, lookup, server_nonce="SERVER")
    first = server.step(client.get_client_first().encode(), NOW)
    client.set_server_first(first.challenge.decode())
    final = client.get_client_final()
    tampered = final.replace("SERVER", "OTHER")
    with pytest.raises(SaslFailure, match="nonce"):
        server.step(tampered.encode(), NOW)


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    """The user's credentials are looked up as the message is read; the password is derived
    by the step's check (the listener runs it off the loop: ``sasl_checks``)."""
    for message in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        step = PlainServer(lookup).step(message, NOW)
        assert (step.done, step.name) == (True, "alice")
        assert step.check is not None and step.check()
    wrong = PlainServer(lookup).step(b"\0alice\0wrong", NOW)
    assert wrong.check is not None and not wrong.check()
    for message, text in (
        (b"\0bob\0alice-secret", "Invalid username or password"),  # no credential: at once
        (b"bob\0alice\0alice-secret", "authorization id"),
        (b"\0alice", "expected 3 tokens"),
        (b"\0\0pw", "must not be empty"),
    ):
        with pytest.raises(SaslFailure, match=text):
            PlainServer(lookup).step(message, NOW)


def plain(s: SaslSession, message: bytes) -> tuple[bytes, int | None]:
    """A PLAIN SaslAuthenticate of session ``s``, its password check run here."""
    step = s.authenticate(message, NOW)
    assert isinstance(step, Step) and step.check is not None and s.checking
    return s.checked(step, step.check(), NOW)


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    return TokenIssuer(tmp_path)


def validator(keys: TokenIssuer, **settings: object) -> TokenValidator:
    return TokenValidator(OAuthSettings(jwks_file=str(keys.path), **settings))  # type: ignore[arg-type]


def oauth_message(token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_accepts_a_signed_token_and_reports_its_expiry(issuer: TokenIssuer) -> None:
    for kid, algorithm in (("rsa-1", "RS256"), ("ec-1", "ES256")):
        now = int(time.time() * 1000)
        token = issuer.token("alice", kid=kid, algorithm=algorithm, lifetime_s=600)
        step = OAuthBearerServer(validator(issuer)).step(oauth_message(token), now)
        assert (step.done, step.name) == (True, "alice")
        assert step.expires_ms is not None and abs(step.expires_ms - (now + 600_000)) < 3000


def test_oauthbearer_refusal_is_a_challenge_then_a_failure(issuer: TokenIssuer) -> None:
    server = OAuthBearerServer(validator(issuer))
    expired = issuer.token("alice", lifetime_s=-120)
    assert server.step(oauth_message(expired), NOW).challenge == OAUTH_INVALID
    with pytest.raises(SaslFailure) as refused:
        server.step(b"\x01", NOW)
    assert refused.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "expired" in refused.value.message


def test_token_validation_rules(issuer: TokenIssuer, tmp_path: Path) -> None:
    strict = validator(issuer, audience=("kip848",), issuer="https://idp", sub_claim="user")
    good = issuer.token(None, aud="kip848", iss="https://idp", user="carol")
    assert strict.validate(good).principal_name == "carol"
    other = TokenIssuer(tmp_path, "other.json")
    refused = {
        "wrong audience": issuer.token(None, aud="other", iss="https://idp", user="carol"),
        "wrong issuer": issuer.token(None, aud="kip848", iss="https://evil", user="carol"),
        "no principal claim": issuer.token("carol", aud="kip848", iss="https://idp"),
        "signed by another key": other.token(None, aud="kip848", iss="https://idp", user="c"),
        "unknown kid": issuer.token(None, kid="nope", aud="kip848", iss="https://idp", user="c"),
        "not a JWT": "garbage",
        "HMAC": __import__("jwt").encode(
            {"exp": time.time() + 60, "user": "c"}, "s" * 32, algorithm="HS256"
        ),
        "too long": "x" * (70 * 1024),
    }
    for why, token in refused.items():
        with pytest.raises(InvalidToken):
            strict.validate(token)
            pytest.fail(why)


def test_a_remembered_token_still_expires_and_a_reloaded_jwks_drops_keys(
    issuer: TokenIssuer,
) -> None:
    tokens = validator(issuer, clock_skew_s=0)
    token = issuer.token("alice", lifetime_s=5)
    assert tokens.validate(token).principal_name == "alice"
    with pytest.raises(InvalidToken, match="expired"):
        tokens.validate(token, now_s=time.time() + 10)
    again = issuer.token("alice")
    assert tokens.validate(again).principal_name == "alice"
    issuer.path.write_text('{"keys": []}')
    assert tokens.reload() is False  # an empty JWKS does not load: the old keys stay
    assert tokens.validate(again).principal_name == "alice"
    replaced = TokenIssuer(issuer.path.parent, "jwks.json")  # new keys in the same file
    assert tokens.reload() is True
    with pytest.raises(InvalidToken):
        tokens.validate(again)
    assert tokens.validate(replaced.token("bob")).principal_name == "bob"


def session(**options: object) -> SaslSession:
    return SaslSession(
        Authenticator(
            mechanisms=("PLAIN", "SCRAM-SHA-512"),
            lookup=lookup,
            **options,  # type: ignore[arg-type]
        )
    )


def test_session_states() -> None:
    s = session()
    with pytest.raises(SaslFailure) as early:
        s.authenticate(b"\0alice\0alice-secret", NOW)
    assert early.value.code == ErrorCode.ILLEGAL_SASL_STATE
    assert s.handshake("GSSAPI")[0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert s.handshake("PLAIN") == (ErrorCode.NONE, "")
    assert s.handshake("PLAIN")[0] == ErrorCode.ILLEGAL_SASL_STATE  # mid-exchange
    assert plain(s, b"\0alice\0alice-secret") == (b"", 0)
    assert s.principal == user("alice") and s.expires_at_ms is None and not s.checking
    # Re-authentication: the same mechanism and principal only.
    assert s.handshake("PLAIN")[0] == ErrorCode.NONE
    with pytest.raises(SaslFailure, match="Re-authentication as User:we,ird=name"):
        plain(s, b"\0we,ird=name\0pw")
    assert s.state == NEED_HANDSHAKE
    # A wrong password: refused once derived.
    assert s.handshake("PLAIN")[0] == ErrorCode.NONE
    with pytest.raises(SaslFailure, match="Invalid username or password"):
        plain(s, b"\0alice\0wrong")
    assert s.state == NEED_HANDSHAKE and s.principal == user("alice")


def test_kip368_session_lifetimes() -> None:
    # Without connections.max.reauth.ms a token still ends its session (Kafka's
    # SaslServerAuthenticator); a credential without an end gives a session without one.
    assert session_lifetime_ms(0, NOW + 5000, NOW) == 5000
    assert session_lifetime_ms(0, NOW - 5, NOW) == 1
    assert session_lifetime_ms(0, None, NOW) == 0
    assert session_lifetime_ms(60_000, None, NOW) == 60_000
    assert session_lifetime_ms(60_000, NOW + 5000, NOW) == 5000  # the token ends first
    assert session_lifetime_ms(60_000, NOW - 5, NOW) == 1
    s = session(reauth_ms=1000)
    s.handshake("PLAIN")
    assert plain(s, b"\0alice\0alice-secret") == (b"", 1000)
    assert not s.expired(NOW + 999) and s.expired(NOW + 1000)


def test_passthrough_reads_the_principal_of_each_mechanism(issuer: TokenIssuer) -> None:
    assert passthrough_principal("PLAIN", b"\0alice\0pw", "sub") == "alice"
    assert passthrough_principal("SCRAM-SHA-256", b"n,,n=we=2Cird,r=abc", "sub") == "we,ird"
    token = issuer.token("dave", azp="x")
    assert passthrough_principal("OAUTHBEARER", oauth_message(token), "sub") == "dave"
    assert passthrough_principal("OAUTHBEARER", oauth_message(token), "azp") == "x"
    for mechanism, message in (
        ("PLAIN", b"nope"),
        ("SCRAM-SHA-256", b"\xff"),
        ("OAUTHBEARER", b""),
    ):
        assert passthrough_principal(mechanism, message, "sub") is None


def test_a_reauthentication_with_another_mechanism_fails_at_its_saslauthenticate() -> None:
    """Kafka's SaslServerAuthenticator (REAUTH_BAD_MECHANISM): the handshake naming another
    enabled mechanism than the session's is answered without error, and the re-authentication
    fails at the SaslAuthenticate after it, whatever it carries. (Before: the handshake was
    refused ILLEGAL_SASL_STATE.)"""
    s = session()
    assert s.handshake("PLAIN") == (ErrorCode.NONE, "")
    assert plain(s, b"\0alice\0alice-secret") == (b"", 0)
    assert s.handshake("SCRAM-SHA-512") == (ErrorCode.NONE, "")
    assert s.mechanism == "PLAIN" and s.principal == user("alice")
    with pytest.raises(SaslFailure) as failed:
        s.authenticate(b"\0alice\0alice-secret", NOW)  # valid PLAIN credentials: still refused
    assert failed.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.value.message == (
        "re-authentication with SASL mechanism SCRAM-SHA-512 of a session authenticated with "
        "PLAIN: only the session's mechanism may re-authenticate it"
    )
    assert s.state == NEED_HANDSHAKE
    # A mechanism that is not enabled is refused at the handshake, as the first time.
    t = session()
    t.handshake("PLAIN")
    plain(t, b"\0alice\0alice-secret")
    assert t.handshake("GSSAPI")[0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
