"""Principals: who a request is from, as the authorizer sees it (Kafka's ``KafkaPrincipal``).

A principal is a type and a name, written ``TYPE:NAME`` (``User:alice``). Every request
carries one: the transport that received it sets it once the client has authenticated
(SASL on the Kafka listener, mTLS or a bearer token on gRPC); a client that did not
authenticate is ``User:ANONYMOUS``, as Kafka's DefaultKafkaPrincipalBuilder names a PLAINTEXT
client. ``User:*`` in an ACL matches every user (``WILDCARD``); it is never a request's
principal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

USER_TYPE = "User"
ANONYMOUS_NAME = "ANONYMOUS"
WILDCARD_NAME = "*"


class PrincipalFormatError(ValueError):
    """Text that is not ``TYPE:NAME`` with a non-empty type and name."""


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``principal_type:name``; ``str()`` gives Kafka's string form. Its hash is computed once
    (a principal keys the authorizer's cache of decisions, on every request)."""

    principal_type: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.principal_type, self.name)))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @property
    def is_wildcard(self) -> bool:
        return self.name == WILDCARD_NAME

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice") (Kafka's SecurityUtils.parseKafkaPrincipal:
        the type is up to the first colon, the name is the rest and may contain colons)."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise PrincipalFormatError(
                f"Principal '{text}' is not of the form TYPE:NAME (e.g. User:alice)."
            )
        return cls(principal_type, name)


def user(name: str) -> KafkaPrincipal:
    """The principal of user ``name`` (``User:name``)."""
    return KafkaPrincipal(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, ANONYMOUS_NAME)
"""A client that did not authenticate (a PLAINTEXT listener, TLS without a client
certificate)."""
WILDCARD_USER = KafkaPrincipal(USER_TYPE, WILDCARD_NAME)
"""``User:*``: in an ACL, every user."""
