"""Who a gRPC call is from (docs/security.md, "Authentication"): the principal the servicers
put on each call's ``Caller`` (``GrpcServicer.principal_of``).

* ``authorization: Bearer <JWT>`` in the call's metadata: the token is checked against the
  JWKS (``oauth.TokenValidator``, the same as the Kafka listener's OAUTHBEARER) and the call is
  ``User:<principal claim>``. A token that is not accepted fails the call with UNAUTHENTICATED
  — never silently anonymous. No password ever travels over gRPC: SCRAM users authenticate on
  the Kafka listener; gRPC clients bring a token (or a certificate).
* Otherwise a verified TLS client certificate: ``User:<subject mapped by
  ssl.principal.mapping.rules>`` (no rule applies: UNAUTHENTICATED).
* Otherwise ``User:ANONYMOUS`` — unless the listener requires authentication
  (``listener.security.protocol.map`` ``GRPC:SASL_SSL`` or ``GRPC:SASL_PLAINTEXT``): then
  UNAUTHENTICATED.

Health checks and reflection are not authenticated (load balancers probe them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.security.principal import ANONYMOUS, KafkaPrincipal, user
from coordinator.security.ssl_principal import NoMatchingRule, SslPrincipalMapper

from .oauth import InvalidToken, TokenValidator
from .tls import subject_of_pem

AUTHORIZATION = "authorization"
SUBJECT_CACHE = 4096


class Unauthenticated(Exception):
    """The call must be refused with gRPC status UNAUTHENTICATED; the message says why."""


def subject_of(context: Any) -> str | None:
    """The verified client certificate's subject of the call's connection: our contexts say it
    (``peer_subject``); grpc.aio's through ``auth_context()`` (:func:`certificate_subject`)."""
    peer_subject = getattr(context, "peer_subject", None)
    if peer_subject is not None:
        subject: str | None = peer_subject()
        return subject
    auth_context = getattr(context, "auth_context", None)
    if auth_context is None:
        return None
    return certificate_subject(auth_context() or {})


def certificate_subject(properties: Mapping[str, Iterable[bytes]]) -> str | None:
    """The subject of the verified client certificate in grpc-core's auth context, written as
    the h2 server and the Kafka listener write it (``tls.subject_of_pem``, from the certificate
    itself: ``x509_pem_cert``). grpc-core's own ``x509_subject`` is OpenSSL's rendering
    (``emailAddress=`` for that OID, non-ASCII letters escaped as ``\\C3\\AB``): with it one
    certificate was two principals, by the process its connection reached (front ends)."""
    pems = list(properties.get("x509_pem_cert", ()))
    return _subject_of_pem(bytes(pems[0])) if pems else None


_subject_of_pem = functools.lru_cache(maxsize=SUBJECT_CACHE)(subject_of_pem)


class GrpcAuthenticator:
    """``principal_of(context)`` for the gRPC servicers (see the module doc)."""

    def __init__(
        self,
        *,
        required: bool = False,
        tokens: TokenValidator | None = None,
        mapper: SslPrincipalMapper | None = None,
        certificates: bool = False,
    ) -> None:
        self.required = required
        self.tokens = tokens
        self.mapper = mapper or SslPrincipalMapper()
        self.certificates = certificates  # the listener asks for client certificates
        self._subjects: dict[str, KafkaPrincipal | None] = {}
        self.refused = 0
        self.on_refused: Callable[[str, str, str, str], None] | None = None
        """Called with ("grpc", mechanism, peer, reason) for each refused call (metrics,
        audit)."""

    @property
    def active(self) -> bool:
        """Whether any call can be other than anonymous (tokens, certificates, or required)."""
        return self.required or self.tokens is not None or self.certificates

    def principal_of(self, context: Any) -> KafkaPrincipal:
        token = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                token = value if isinstance(value, str) else value.decode("latin-1")
                break
        if token is not None and self.tokens is not None:  # without a JWKS: not looked at
            return self._token_principal(context, token)
        if self.certificates:
            subject = subject_of(context)
            if subject is not None:
                return self._certificate_principal(context, subject)
        if self.required:
            raise self._refuse(
                context,
                "none",
                "Authentication required: send 'authorization: Bearer <JWT>' metadata or a "
                "client certificate",
            )
        return ANONYMOUS

    def _refuse(self, context: Any, mechanism: str, why: str) -> Unauthenticated:
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused("grpc", mechanism, context.peer() or "", why)
        return Unauthenticated(why)

    def _token_principal(self, context: Any, header: str) -> KafkaPrincipal:
        scheme, _sep, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise self._refuse(
                context, "bearer", "The authorization metadata must be 'Bearer <JWT>'"
            )
        assert self.tokens is not None
        try:
            return user(self.tokens.validate(token.strip()).principal_name)
        except InvalidToken as exc:
            raise self._refuse(context, "bearer", f"Invalid bearer token: {exc}") from None

    def _certificate_principal(self, context: Any, subject: str) -> KafkaPrincipal:
        try:
            principal = self._subjects[subject]
        except KeyError:
            try:
                principal = user(self.mapper.name(subject))
            except NoMatchingRule:
                principal = None
            if len(self._subjects) >= SUBJECT_CACHE:
                self._subjects.clear()
            self._subjects[subject] = principal
        if principal is None:
            raise self._refuse(
                context,
                "certificate",
                f"No ssl.principal.mapping.rules rule applies to the certificate '{subject}'",
            )
        return principal
