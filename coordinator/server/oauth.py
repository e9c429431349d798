"""Bearer tokens: JWTs checked against a local JWKS file (KIP-768's validation, Kafka's names).

One :class:`TokenValidator` serves the Kafka listener's SASL/OAUTHBEARER and the gRPC
listener's ``authorization: Bearer <JWT>``. A token is accepted when

* its header names a signing algorithm we accept (RSA, RSA-PSS, ECDSA, EdDSA: never ``none``
  nor a shared-secret HMAC) and a key of the JWKS file (by ``kid``; a JWKS of one key serves
  tokens without ``kid``) of a matching type signed it;
* it has not expired (``exp`` is required; ``nbf`` and ``iat`` are checked when present), with
  ``sasl.oauthbearer.clock.skew.seconds`` of leeway;
* its ``aud`` holds one of ``sasl.oauthbearer.expected.audience`` and its ``iss`` is
  ``sasl.oauthbearer.expected.issuer``, when those are set;
* it carries the principal claim (``sasl.oauthbearer.sub.claim.name``, ``sub``): the principal
  is ``User:<claim>``.

Checking a signature costs tens of microseconds, so a valid token is remembered (bounded) with
its expiry: a gRPC client that sends the same token with every call pays once. The JWKS file is
re-read on SIGHUP (:meth:`TokenValidator.reload`): keys removed from it stop being accepted,
remembered tokens included.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.types import Options

from .security_config import OAuthSettings

log = logging.getLogger("kip848.security")

ACCEPTED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
MAX_TOKEN_BYTES = 64 * 1024
"""A longer token is refused before it is parsed."""
CACHE_SIZE = 10_000


class InvalidToken(Exception):
    """A token that is not accepted; the message says why (safe to tell the client)."""


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal_name: str
    expires_ms: int


class TokenValidator:
    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self.keys: dict[str | None, Any] = self._load()
        self._valid: dict[str, ValidToken] = {}

    def _load(self) -> dict[str | None, Any]:
        """kid -> PyJWK from the JWKS file (key None: the only key, for tokens without kid).
        Raises :class:`ValueError` naming the file if it does not load."""
        path = self.settings.jwks_file
        try:
            with open(path, encoding="utf-8") as fp:
                data = json.load(fp)
            keyset = jwt.PyJWKSet.from_dict(data)
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            raise ValueError(f"cannot load the JWKS file {path}: {exc}") from None
        keys: dict[str | None, Any] = {}
        for key in keyset.keys:
            keys[key.key_id] = key
        if len(keyset.keys) == 1:
            keys[None] = keyset.keys[0]
        return keys

    def reload(self) -> bool:
        """Re-read the JWKS file (SIGHUP); False (logged, old keys kept) if it does not load."""
        try:
            keys = self._load()
        except ValueError as exc:
            log.error("Reloading the JWKS failed (the keys loaded before stay in use): %s", exc)
            return False
        self.keys = keys
        self._valid.clear()
        log.info("JWKS %s reloaded: %d keys.", self.settings.jwks_file, len(keys))
        return True

    def validate(self, token: str, now_s: float | None = None) -> ValidToken:
        """The token's principal name and expiry; :class:`InvalidToken` if it is refused."""
        now = time.time() if now_s is None else now_s
        known = self._valid.get(token)
        if known is not None:
            if known.expires_ms + self.settings.clock_skew_s * 1000 > now * 1000:
                return known
            del self._valid[token]
            raise InvalidToken("the token has expired")
        checked = self._check(token, now)
        if len(self._valid) >= CACHE_SIZE:
            self._valid.clear()
        self._valid[token] = checked
        return checked

    def _check(self, token: str, now: float) -> ValidToken:
        settings = self.settings
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"not a JWT: {exc}") from None
        algorithm = header.get("alg")
        if algorithm not in ACCEPTED_ALGORITHMS:
            raise InvalidToken(f"signing algorithm {algorithm!r} is not accepted")
        kid = header.get("kid")
        key = self.keys.get(kid if isinstance(kid, str) else None)
        if key is None:
            raise InvalidToken(f"no key {kid!r} in the JWKS" if kid else "the token has no kid")
        options: Options = {
            "require": ["exp"],
            "verify_aud": bool(settings.audience),
            "verify_iss": settings.issuer is not None,
        }
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=list(settings.audience) or None,
                issuer=settings.issuer,
                leeway=settings.clock_skew_s,
                options=options,
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"invalid token: {exc}") from None
        except (ValueError, TypeError) as exc:  # a key of the wrong type for the algorithm
            raise InvalidToken(f"invalid token: {exc}") from None
        name = claims.get(settings.sub_claim)
        if not isinstance(name, str) or not name:
            raise InvalidToken(f"the token has no {settings.sub_claim!r} claim")
        expires = claims["exp"]
        if not isinstance(expires, int | float):
            raise InvalidToken("the token's exp is not a number")
        return ValidToken(name, int(expires * 1000))
