"""Kafka's ACL model: resource patterns, access control entries, bindings and filters.

Names and numbers are Kafka's (org.apache.kafka.common.resource / .acl): resource types
(TOPIC, GROUP, CLUSTER named ``kafka-cluster``, TRANSACTIONAL_ID ...), pattern types (LITERAL,
where the name ``*`` is every resource of its type, and PREFIXED; ANY and MATCH only in
filters), operations (READ, WRITE, ... ALL) and permissions (ALLOW, DENY). An ACL (a
*binding*) is a resource pattern plus an entry: principal (``User:alice``, or ``User:*`` for
every user), host (``*`` for every host), operation, permission.

A filter selects bindings, as DescribeAcls and DeleteAcls take them (Kafka's
AclBindingFilter): ANY matches every value, a None name/principal/host matches any; MATCH
selects the patterns that *apply to* the named resource (the literal name, ``*`` and every
prefix of it).

Pure: validation raises :class:`InvalidRequestError` with Kafka's messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from coordinator.core.errors import InvalidRequestError
from coordinator.core.records import AccessControlEntryKey

from .principal import KafkaPrincipal, PrincipalFormatError

CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name (Kafka's ``Resource.CLUSTER_NAME``)."""
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
E = TypeVar("E", bound=IntEnum)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIED_BY_ALLOW: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
"""Operation -> the operations whose ALLOW also allows it (Kafka's StandardAuthorizerData:
READ, WRITE, DELETE or ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). A DENY
never implies anything."""


SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
"""The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what an
"authorized operations" bit field of a response is made of."""


def enum_name(value: IntEnum) -> str:
    """Kafka's display name (``TRANSACTIONAL_ID``, ``DESCRIBE_CONFIGS``)."""
    return value.name


def parse_enum(kind: type[E], text: str) -> E:
    """``read``/``Read``/``READ``/``describe-configs``/``DescribeConfigs`` -> the member;
    ValueError naming the choices otherwise."""
    key = text.strip().replace("-", "_").upper()
    if key in kind.__members__:
        return kind[key]
    squashed = {name.replace("_", ""): member for name, member in kind.__members__.items()}
    member = squashed.get(key.replace("_", ""))
    if member is None:
        choices = ", ".join(n for n in kind.__members__ if n != "UNKNOWN")
        raise ValueError(f"unknown {kind.__name__} '{text}' (one of {choices})")
    return member


@dataclass(frozen=True, slots=True, kw_only=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def key(self) -> AccessControlEntryKey:
        """Its record key."""
        return AccessControlEntryKey(
            int(self.resource_type),
            self.resource_name,
            int(self.pattern_type),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission_type),
        )

    @classmethod
    def of_key(cls, key: AccessControlEntryKey) -> AclBinding:
        return cls(
            resource_type=ResourceType(key.resource_type),
            resource_name=key.resource_name,
            pattern_type=PatternType(key.pattern_type),
            principal=key.principal,
            host=key.host,
            operation=AclOperation(key.operation),
            permission_type=AclPermissionType(key.permission_type),
        )

    def __str__(self) -> str:
        """Kafka's display form (kafka-acls.sh --list)."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name}) on {self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.resource_name}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter). None: any value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b) and self.matches_entry(b)

    def matches_pattern(self, b: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type is not ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != b.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern is PatternType.ANY or pattern == b.pattern_type:
            return name == b.resource_name
        if b.pattern_type is PatternType.LITERAL:  # MATCH
            return name == b.resource_name or b.resource_name == WILDCARD_RESOURCE
        return name.startswith(b.resource_name)  # MATCH against PREFIXED

    def matches_entry(self, b: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != b.operation:
            return False
        return (
            self.permission_type is AclPermissionType.ANY
            or self.permission_type == b.permission_type
        )


def _known(kind: type[E], value: int, what: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise InvalidRequestError(f"Invalid {what} {value}.") from None


def _enums(
    resource_type: int, pattern_type: int, operation: int, permission_type: int
) -> tuple[ResourceType, PatternType, AclOperation, AclPermissionType]:
    return (
        _known(ResourceType, resource_type, "resourceType"),
        _known(PatternType, pattern_type, "patternType"),
        _known(AclOperation, operation, "operation"),
        _known(AclPermissionType, permission_type, "permissionType"),
    )


def new_binding(
    *,
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission_type: int,
) -> AclBinding:
    """A binding to create, checked as Kafka's AclControlManager.validateNewAcl does (plus the
    CLUSTER name rule of Kafka's authorizer): INVALID_REQUEST with Kafka's message otherwise."""
    rtype, ptype, op, perm = _enums(resource_type, pattern_type, operation, permission_type)
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {rtype.name}")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"Invalid patternType {ptype.name}")
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {op.name}")
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequestError(f"Invalid permissionType {perm.name}")
    if not resource_name:
        raise InvalidRequestError("Resource name should not be empty")
    if rtype is ResourceType.CLUSTER and resource_name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    try:
        KafkaPrincipal.parse(principal)
    except PrincipalFormatError:
        raise InvalidRequestError(
            f"Could not parse principal from `{principal}` (no colon is present separating the "
            "principal type from the principal name)"
        ) from None
    if not host:
        raise InvalidRequestError("Host should not be empty (use * for every host)")
    return AclBinding(
        resource_type=rtype,
        resource_name=resource_name,
        pattern_type=ptype,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def new_filter(
    *,
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission_type: int,
) -> AclBindingFilter:
    """A filter as DescribeAcls/DeleteAcls send it; UNKNOWN values (or numbers Kafka does not
    know) are INVALID_REQUEST, as Kafka answers a filter it cannot apply."""
    rtype, ptype, op, perm = _enums(resource_type, pattern_type, operation, permission_type)
    for value in (rtype, ptype, op, perm):
        if value == 0:
            raise InvalidRequestError(
                f"The filter's {type(value).__name__} is UNKNOWN: it would match nothing."
            )
    return AclBindingFilter(
        resource_type=rtype,
        resource_name=resource_name,
        pattern_type=ptype,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def group_by_resource(
    bindings: Iterable[AclBinding],
) -> list[tuple[tuple[ResourceType, str, PatternType], list[AclBinding]]]:
    """Bindings grouped by resource pattern, as DescribeAcls answers them (sorted by type,
    name, pattern; each resource's entries by principal, host, operation, permission)."""
    out: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in bindings:
        out.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return [
        (
            resource,
            sorted(
                entries,
                key=lambda b: (b.principal, b.host, int(b.operation), int(b.permission_type)),
            ),
        )
        for resource, entries in sorted(
            out.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], int(kv[0][2]))
        )
    ]
