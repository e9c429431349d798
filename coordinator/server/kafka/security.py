"""One Kafka listener's security: its protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), its
TLS, how a client certificate becomes a principal, and (SASL) what authenticates clients.

The listener keeps one per bound port (a multi-broker upstream gives a listener one port per
broker, each with the listener's security); each connection reads its own at accept."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.security.principal import KafkaPrincipal, user
from coordinator.security.ssl_principal import NoMatchingRule, SslPrincipalMapper

from ..tls import ServerTls


@dataclass(slots=True, kw_only=True)
class ListenerSecurity:
    """``tls``: the listener's TLS (SSL, SASL_SSL). ``mapper``: ``ssl.principal.mapping.rules``
    for client certificates (SSL). ``mechanisms``, ``reauth_ms`` (``connections.max.reauth.ms``,
    0: none) and ``authenticator`` (``sasl.Authenticator``): SASL."""

    name: str
    protocol: str = "PLAINTEXT"
    tls: ServerTls | None = None
    mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)
    mechanisms: tuple[str, ...] = ()
    reauth_ms: int = 0
    authenticator: Any = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def certificate_principal(self, subject: str) -> KafkaPrincipal | None:
        """``User:<mapped subject>``; None when no mapping rule applies (refused)."""
        try:
            return user(self.mapper.name(subject))
        except NoMatchingRule:
            return None
