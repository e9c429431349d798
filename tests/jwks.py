"""JWTs and a JWKS file made by the tests (RSA and EC keys from ``cryptography``; PyJWT signs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa


class TokenIssuer:
    """Keys, their JWKS file (``path``), and tokens signed by them."""

    __test__ = False

    def __init__(self, directory: Path, name: str = "jwks.json") -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.path = directory / name
        self.write()

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key, alg in (("rsa-1", self.rsa, "RS256"), ("ec-1", self.ec, "ES256")):
            jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": keys}

    def write(self) -> None:
        self.path.write_text(json.dumps(self.jwks()))

    def token(
        self,
        sub: str | None = "alice",
        *,
        lifetime_s: float = 3600,
        kid: str = "rsa-1",
        algorithm: str = "RS256",
        key: Any = None,
        **claims: Any,
    ) -> str:
        now = time.time()
        body: dict[str, Any] = {"iat": int(now), "exp": int(now + lifetime_s), **claims}
        if sub is not None:
            body["sub"] = sub
        signer = key or (self.rsa if algorithm.startswith(("RS", "PS")) else self.ec)
        return jwt.encode(body, signer, algorithm=algorithm, headers={"kid": kid})
