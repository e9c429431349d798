"""SCRAM math (coordinator/security/scram.py) against RFC 7677's worked example and against an
independent implementation (scramp), and principals' string form."""

from __future__ import annotations

import base64

import pytest
import scramp

from coordinator.security import scram
from coordinator.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    PrincipalFormatError,
    user,
)
from coordinator.security.scram import ScramMechanism

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL_BARE = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
AUTH_MESSAGE = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_BARE}".encode()
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_client_proof_and_server_signature() -> None:
    salted = scram.salted_password(SHA256, "pencil", SALT, 4096)
    cred = scram.credential_from_salted_password(SHA256, SALT, salted, 4096)
    assert base64.b64encode(scram.client_proof(SHA256, salted, AUTH_MESSAGE)).decode() == PROOF
    assert scram.verify_client_proof(SHA256, cred, AUTH_MESSAGE, base64.b64decode(PROOF))
    signature = scram.server_signature(SHA256, cred, AUTH_MESSAGE)
    assert base64.b64encode(signature).decode() == SERVER_SIGNATURE


def test_a_wrong_proof_is_refused() -> None:
    cred = scram.credential_from_password(SHA256, "pencil", SALT, 4096)
    wrong = scram.client_proof(
        SHA256, scram.salted_password(SHA256, "pencil!", SALT, 4096), AUTH_MESSAGE
    )
    assert not scram.verify_client_proof(SHA256, cred, AUTH_MESSAGE, wrong)
    assert not scram.verify_client_proof(SHA256, cred, AUTH_MESSAGE, b"short")
    assert not scram.verify_client_proof(SHA256, cred, AUTH_MESSAGE + b"x", base64.b64decode(PROOF))


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("password", ["pencil", "pässwörd with spaces", ""])
def test_stored_credentials_equal_scramp(mechanism: ScramMechanism, password: str) -> None:
    salt = bytes(range(16))
    ours = scram.credential_from_password(mechanism, password, salt, 4096)
    theirs = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info(
        password, iteration_count=4096, salt=salt
    )
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == theirs


def test_mechanism_names_and_numbers() -> None:
    assert [(m.value, m.mechanism_name) for m in ScramMechanism] == [
        (1, "SCRAM-SHA-256"),
        (2, "SCRAM-SHA-512"),
    ]
    assert ScramMechanism.of("scram-sha-512") is SHA512
    assert ScramMechanism.of("SCRAM_SHA_256") is SHA256
    assert ScramMechanism.of("2") is SHA512
    assert ScramMechanism.of(1) is SHA256
    with pytest.raises(ValueError, match="SCRAM-SHA-256 or SCRAM-SHA-512"):
        ScramMechanism.of("SCRAM-SHA-1")


def test_credentials_never_print_their_keys() -> None:
    cred = scram.credential_from_password(SHA512, "pencil", SALT, 8192)
    assert repr(cred) == "ScramCredential(iterations=8192, <salted keys hidden>)"


@pytest.mark.parametrize(
    ("name", "escaped"), [("alice", "alice"), ("a=b,c", "a=3Db=2Cc"), ("==,", "=3D=3D=2C")]
)
def test_sasl_names_round_trip(name: str, escaped: str) -> None:
    assert scram.sasl_name(name) == escaped
    assert scram.username_of(escaped) == name


@pytest.mark.parametrize("bad", ["a=b", "a=2", "a,b", "=3"])
def test_malformed_sasl_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        scram.username_of(bad)


def test_principals() -> None:
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert user("alice") == KafkaPrincipal.parse("User:alice")
    assert KafkaPrincipal.parse("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")
    assert KafkaPrincipal.parse("User:*").is_wildcard
    for bad in ["alice", ":alice", "User:", ""]:
        with pytest.raises(PrincipalFormatError):
            KafkaPrincipal.parse(bad)
