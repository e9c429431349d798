"""The authorizer: may this principal, from this host, perform this operation on this resource?

Kafka's StandardAuthorizer rules (StandardAuthorizerData), over the ACLs of
:class:`~.metadata.SecurityMetadata`:

1. A principal listed in ``super.users`` may do anything.
2. The ACLs that apply to the resource are those of its type whose pattern covers its name:
   LITERAL with the same name or ``*``, PREFIXED with a prefix of the name.
3. No ACL applies to the resource at all -> ``allow.everyone.if.no.acl.found`` decides.
4. Of the ACLs that apply, those that name the principal (or ``User:*``) and the host (or
   ``*``) count. A DENY of the operation (or of ALL) refuses — DENY always wins. Otherwise an
   ALLOW of the operation, of ALL, or of an operation that implies it (READ, WRITE, DELETE,
   ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows. Otherwise refused.

Until the ACLs are loaded (``ready``: the cluster log replayed at start-up, on a loader thread)
nothing is decided on them — an empty or half-replayed set would open every resource or refuse
every one: only super users are allowed, and :attr:`Authorizer.open` is False (Kafka's
StandardAuthorizer before its initial load, KIP-801). Whoever asks then says "not yet"
(COORDINATOR_LOAD_IN_PROGRESS, or the Kafka listener waits before reading its connections).

Decisions are cached per (principal, host, operation, resource type, name) and the cache is
dropped whenever the ACLs change (:attr:`SecurityMetadata.acl_generation`): a steady heartbeat
costs one dict lookup. Decisions are made over the ACLs' index of their generation
(:meth:`SecurityMetadata.acl_index`, ``acl_index.py``): built whole once where the ACLs were
loaded (a loader thread), then kept in step as ACL records are replayed, so a decision after
a change finds it ready — exactly the ACLs as they are, with nothing indexed again on the loop.
Without any ACL and with ``allow.everyone.if.no.acl.found`` (the default) every request is
allowed without a lookup.

Pure: no IO, no clock. Whoever refuses a request reports it (``on_refused``, set by the
server for the audit trail and the metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from .acl_index import AclIndex
from .acls import (
    IMPLIED_BY_ALLOW,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from .metadata import SecurityMetadata
from .principal import KafkaPrincipal, PrincipalFormatError

Question = tuple[KafkaPrincipal, str, int, int, str]
"""(principal, host, operation, resource type, resource name): one decision, cached."""
CACHE_LIMIT = 100_000
"""Cached decisions kept at most (then the cache starts over)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizerConfig:
    """Kafka's names: ``super.users`` (``User:a;User:b``) and
    ``allow.everyone.if.no.acl.found``. This coordinator's default for the latter is true (a
    coordinator started without security options keeps serving every client; Kafka's is
    false); the start-up log says which listeners are open."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = True

    @classmethod
    def parse(cls, super_users: str = "", allow_everyone: str | bool = True) -> AuthorizerConfig:
        """From the settings' text; ValueError with a clear message for a bad value."""
        names = []
        for item in super_users.split(";"):
            item = item.strip()
            if not item:
                continue
            try:
                KafkaPrincipal.parse(item)
            except PrincipalFormatError as exc:
                raise ValueError(f"super.users: {exc}") from None
            names.append(item)
        if isinstance(allow_everyone, str):
            text = allow_everyone.strip().lower()
            if text not in ("true", "false"):
                raise ValueError("allow.everyone.if.no.acl.found must be true or false")
            allow_everyone = text == "true"
        return cls(super_users=frozenset(names), allow_everyone_if_no_acl_found=allow_everyone)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A refused action, for the audit trail and the metrics."""

    principal: KafkaPrincipal
    host: str
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    api: str
    client_id: str
    protocol: str


class Authorizer:
    """Decides over ``metadata``'s ACLs with ``config`` (see the module doc)."""

    def __init__(
        self,
        metadata: SecurityMetadata,
        config: AuthorizerConfig | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.metadata = metadata
        self.config = config or AuthorizerConfig()
        self._ready = ready
        """Whether ``metadata`` holds the ACLs yet (None: from the start); see the module doc."""
        self.on_refused: Callable[[Refusal], None] | None = None
        """Told of every refusal a request reports (:meth:`refused`): the audit trail and the
        metrics (installed by the server)."""
        self._generation = -1
        self._open = False
        self._index = AclIndex()
        self._cache: dict[Question, bool] = {}

    # ------------------------------------------------------------ decisions

    @property
    def ready(self) -> bool:
        """The ACLs are loaded: decisions are made on them (see the module doc)."""
        ready = self._ready
        if ready is None:
            return True
        if not ready():
            return False
        self._ready = None  # loaded once, loaded for good
        return True

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.config.super_users

    @property
    def open(self) -> bool:
        """True while every request is allowed without looking: no ACL exists and
        ``allow.everyone.if.no.acl.found`` is on (never before the ACLs are loaded)."""
        if self._ready is not None and not self.ready:
            return False
        if self.metadata.acl_generation != self._generation:
            self._refresh()
        return self._open

    def _refresh(self) -> None:
        generation = self.metadata.acl_generation
        if generation != self._generation:
            self._index = self.metadata.acl_index()
            count = self.metadata.acl_count()
            self._open = self.config.allow_everyone_if_no_acl_found and not count
            self._cache.clear()
            self._generation = generation

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: int,
        resource_type: int,
        name: str,
    ) -> bool:
        """May ``principal`` from ``host`` (an IP address, ``/``-prefixed as the listeners show
        it, or "" when unknown) perform ``operation`` (an :class:`AclOperation` number) on the
        resource (a :class:`ResourceType` number and a name)? Cached (see the module doc); with
        no ACL and ``allow.everyone.if.no.acl.found``, allowed at once. Before the ACLs are
        loaded: super users only."""
        if self._ready is not None and not self.ready:
            return self.is_super_user(principal)
        if self.metadata.acl_generation != self._generation:
            self._refresh()
        if self._open:
            return True
        key: Question = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = _decide(self._index, self.config, *key)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def pinned(self) -> Callable[[KafkaPrincipal, str, int, int, str], bool]:
        """:meth:`authorize` as the ACLs are now, for another thread: over the ACLs' index of
        this generation (a change of the ACLs makes another; this one stays as it is), without
        the cache; what it decides is what :meth:`authorize` decides now. (A Metadata answer
        of every topic is filtered and given its topics' authorized operations off the loop,
        from one state of the ACLs.)"""
        if self._ready is not None and not self.ready:
            supers = self.config.super_users
            return lambda principal, *_question: str(principal) in supers
        if self.metadata.acl_generation != self._generation:
            self._refresh()
        if self._open:
            return lambda *_question: True
        return partial(_decide, self._index, self.config)

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int
    ) -> bool:
        """May ``principal`` from ``host`` perform ``operation`` on *some* resource of the type
        (Kafka's ``Authorizer.authorizeByResourceType``: an idempotent producer needs WRITE on
        any topic)? A super user may, as may anyone where the operation on a resource no ACL
        names would be allowed (``allow.everyone.if.no.acl.found``: Kafka asks about a
        resource named ``hardcode``). Otherwise an ALLOW of the operation (or ALL) for the
        principal (or ``User:*``) and host (or ``*``) that no DENY dominates: a LITERAL ``*``
        DENY dominates everything, a LITERAL DENY its name, a PREFIXED DENY every name and
        prefix it begins. Not cached (rare: producers ask once)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        if not self.ready:
            return False
        rtype = ResourceType(resource_type)
        who, host = str(principal), host.lstrip("/")
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allows: list[AclBinding] = []
        for b in self._index.of_type(rtype):
            if b.principal != who and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != host and b.host != WILDCARD_HOST:
                continue
            if b.operation is not AclOperation(operation) and b.operation is not AclOperation.ALL:
                continue
            literal = b.pattern_type is PatternType.LITERAL
            if b.permission_type is AclPermissionType.DENY:
                if literal and b.resource_name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(b.resource_name)
            else:
                allows.append(b)
        for b in allows:
            name = b.resource_name
            if b.pattern_type is PatternType.LITERAL:
                if name == WILDCARD_RESOURCE:
                    return True
                if name in deny_literal:
                    continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    # ------------------------------------------------------------ refusals

    def refused(self, refusal: Refusal) -> None:
        """A request was refused (or part of it): tell ``on_refused``."""
        hook = self.on_refused
        if hook is not None:
            hook(refusal)


def _decide(index: AclIndex, config: AuthorizerConfig, *question: Any) -> bool:
    """The decision over ``index`` with ``config`` (the module doc's rules 1-4; pure)."""
    principal, host, op, rtype, name = question
    host = host.lstrip("/")
    operation, resource_type = AclOperation(op), ResourceType(rtype)
    who = str(principal)
    if who in config.super_users:
        return True
    applying = index.applying(resource_type, name)
    if not applying:
        return config.allow_everyone_if_no_acl_found
    implied = IMPLIED_BY_ALLOW.get(operation, frozenset())
    allowed = False
    for b in applying:
        if b.principal != who and b.principal != WILDCARD_PRINCIPAL:
            continue
        if b.host != host and b.host != WILDCARD_HOST:
            continue
        if b.permission_type is AclPermissionType.DENY:
            if b.operation is operation or b.operation is AclOperation.ALL:
                return False
        elif b.operation is operation or b.operation is AclOperation.ALL or b.operation in implied:
            allowed = True
    return allowed
