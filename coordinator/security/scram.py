"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka computes and stores them.

Kafka keeps, per user and mechanism, a *salted* credential — never the password: the salt,
the iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")``, where ``SaltedPassword = Hi(password, salt, i)`` is
PBKDF2-HMAC with the mechanism's hash (Kafka's ScramFormatter). The server checks a client's
proof by recomputing ``ClientKey = proof XOR HMAC(StoredKey, AuthMessage)`` and comparing
``H(ClientKey)`` with StoredKey; it proves itself with ``HMAC(ServerKey, AuthMessage)``.

These are the only SCRAM computations of the project: the credential records
(``metadata.py``), ``kip848 users`` (which salts the password on the operator's machine) and
the SASL/SCRAM server of the Kafka listener all call them. Pure functions over bytes
(hashlib and hmac only): no IO, no randomness — a salt is always given.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import IntEnum

MIN_ITERATIONS = 4096
"""Kafka's ScramMechanism.minIterations (both mechanisms)."""
MAX_ITERATIONS = 16384
"""Kafka's ScramMechanism.maxIterations: AlterUserScramCredentials refuses more."""
DEFAULT_ITERATIONS = 4096
"""kafka-configs.sh's default for ``SCRAM-SHA-256=[password=...]``."""


class ScramMechanism(IntEnum):
    """Kafka's ``ScramMechanism``, with its wire numbers (DescribeUserScramCredentials,
    AlterUserScramCredentials and the credential records use them)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name: ``SCRAM-SHA-256``."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def of(cls, name_or_number: str | int) -> ScramMechanism:
        """``SCRAM-SHA-256``/``scram-sha-256``/``1`` -> the mechanism; ValueError otherwise."""
        if isinstance(name_or_number, int):
            return cls(name_or_number)
        text = name_or_number.strip().upper().replace("-", "_")
        if text.isdigit():
            return cls(int(text))
        try:
            return cls[text]
        except KeyError:
            raise ValueError(
                f"Unknown SCRAM mechanism '{name_or_number}' (SCRAM-SHA-256 or SCRAM-SHA-512)."
            ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    """What is stored for one user and mechanism (Kafka's ScramCredential)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # never print the keys (logs, tracebacks)
        return f"ScramCredential(iterations={self.iterations}, <salted keys hidden>)"


def _hmac(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, mechanism.hash_name)


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    if len(a) != len(b):
        raise ValueError("SCRAM values of different lengths")
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def salted_password(
    mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int
) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2-HMAC with the mechanism's hash. Kafka normalizes a
    password to its UTF-8 bytes (no SASLprep)."""
    raw = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(mechanism.hash_name, raw, salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Client Key")


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a salted password (what AlterUserScramCredentials sends)."""
    return ScramCredential(
        salt=salt,
        stored_key=_hash(mechanism, client_key(mechanism, salted)),
        server_key=_hmac(mechanism, salted, b"Server Key"),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int
) -> ScramCredential:
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def client_proof(mechanism: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    """The client's proof: ``ClientKey XOR HMAC(StoredKey, AuthMessage)`` (the client side,
    for clients and tests)."""
    key = client_key(mechanism, salted)
    return _xor(key, _hmac(mechanism, _hash(mechanism, key), auth_message))


def verify_client_proof(
    mechanism: ScramMechanism, credential: ScramCredential, auth_message: bytes, proof: bytes
) -> bool:
    """The server's check of a client's proof (constant time)."""
    signature = _hmac(mechanism, credential.stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    return hmac.compare_digest(_hash(mechanism, _xor(proof, signature)), credential.stored_key)


def server_signature(
    mechanism: ScramMechanism, credential: ScramCredential, auth_message: bytes
) -> bytes:
    """``HMAC(ServerKey, AuthMessage)``: the ``v=`` of the server-final message."""
    return _hmac(mechanism, credential.server_key, auth_message)


def sasl_name(username: str) -> str:
    """A user name as SCRAM messages carry it (RFC 5802: ``=`` -> ``=3D``, ``,`` -> ``=2C``)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(sasl: str) -> str:
    """The inverse of :func:`sasl_name`; ValueError for a malformed ``=`` escape."""
    out = []
    i = 0
    while i < len(sasl):
        ch = sasl[i]
        if ch == "=":
            code = sasl[i : i + 3]
            if code == "=3D":
                out.append("=")
            elif code == "=2C":
                out.append(",")
            else:
                raise ValueError(f"Invalid SCRAM user name escape in '{sasl}'.")
            i += 3
            continue
        if ch == ",":
            raise ValueError(f"Invalid SCRAM user name '{sasl}' (unescaped comma).")
        out.append(ch)
        i += 1
    return "".join(out)
