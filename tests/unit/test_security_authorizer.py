"""Kafka's ACL model and authorizer rules (coordinator/security/acls.py, authorizer.py)."""

from __future__ import annotations

import pytest

from coordinator.core.commands import SequentialIds
from coordinator.core.errors import InvalidRequestError
from coordinator.factory import new_cluster
from coordinator.security.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    new_binding,
    new_filter,
    parse_enum,
)
from coordinator.security.authorizer import Authorizer, AuthorizerConfig
from coordinator.security.metadata import AclCreation
from coordinator.security.principal import ANONYMOUS, user

OP, RT, PT, PERM = AclOperation, ResourceType, PatternType, AclPermissionType
ALICE, BOB = user("alice"), user("bob")


def acl(
    name: str,
    op: AclOperation,
    perm: AclPermissionType = PERM.ALLOW,
    *,
    principal: str = "User:alice",
    rtype: ResourceType = RT.GROUP,
    pattern: PatternType = PT.LITERAL,
    host: str = "*",
):
    return new_binding(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def authorizer(*bindings, **config) -> Authorizer:
    _reg, sec = new_cluster(SequentialIds())
    sec.create_acls([AclCreation(binding=b) for b in bindings])
    return Authorizer(sec, AuthorizerConfig(**config))


def may(az: Authorizer, who, op, name="g", rtype=RT.GROUP, host="10.0.0.1") -> bool:
    return az.authorize(who, host, op, rtype, name)


def test_without_acls_everyone_may_everything_by_default() -> None:
    az = authorizer()
    assert az.open
    assert may(az, ANONYMOUS, OP.DELETE) and may(az, ALICE, OP.ALTER, "kafka-cluster", RT.CLUSTER)
    closed = authorizer(allow_everyone_if_no_acl_found=False)
    assert not closed.open and not may(closed, ALICE, OP.READ)


def test_with_acls_on_a_resource_only_they_decide_for_it() -> None:
    az = authorizer(acl("g", OP.READ))
    assert not az.open
    assert may(az, ALICE, OP.READ)
    assert not may(az, BOB, OP.READ)  # ACLs exist for g: allow.everyone does not apply
    assert not may(az, ALICE, OP.DELETE)
    assert may(az, BOB, OP.READ, "other")  # no ACL on "other": allow.everyone


def test_read_write_delete_alter_imply_describe_and_alter_configs_describe_configs() -> None:
    for op in (OP.READ, OP.WRITE, OP.DELETE, OP.ALTER):
        assert may(authorizer(acl("g", op)), ALICE, OP.DESCRIBE), op
    assert may(authorizer(acl("g", OP.ALTER_CONFIGS)), ALICE, OP.DESCRIBE_CONFIGS)
    assert not may(authorizer(acl("g", OP.DESCRIBE)), ALICE, OP.READ)
    assert not may(authorizer(acl("g", OP.CREATE)), ALICE, OP.DESCRIBE)
    assert may(authorizer(acl("g", OP.ALL)), ALICE, OP.CLUSTER_ACTION)


def test_deny_wins_and_implies_nothing() -> None:
    az = authorizer(acl("g", OP.ALL), acl("g", OP.READ, PERM.DENY))
    assert not may(az, ALICE, OP.READ)
    assert may(az, ALICE, OP.DESCRIBE)  # a DENY of READ does not deny DESCRIBE
    az = authorizer(acl("g", OP.READ), acl("g", OP.ALL, PERM.DENY, principal="User:*"))
    assert not may(az, ALICE, OP.READ) and not may(az, ALICE, OP.DESCRIBE)


def test_patterns_wildcards_and_hosts() -> None:
    az = authorizer(
        acl("pay-", OP.READ, pattern=PT.PREFIXED),
        acl("*", OP.DESCRIBE, principal="User:*"),
        acl("pay-eu", OP.READ, PERM.DENY, host="10.0.0.9"),
    )
    assert may(az, ALICE, OP.READ, "pay-us")
    assert not may(az, ALICE, OP.READ, "pa")
    assert may(az, BOB, OP.DESCRIBE, "anything") and not may(az, BOB, OP.READ, "pay-us")
    assert may(az, ALICE, OP.READ, "pay-eu", host="10.0.0.1")
    assert not may(az, ALICE, OP.READ, "pay-eu", host="10.0.0.9")


def test_resource_types_are_apart() -> None:
    az = authorizer(acl("t", OP.READ, rtype=RT.TOPIC))
    assert may(az, ALICE, OP.READ, "t", RT.TOPIC)
    assert not may(az, BOB, OP.READ, "t", RT.TOPIC)
    assert may(az, BOB, OP.READ, "t", RT.GROUP)  # a group "t" has no ACL


def test_super_users_may_everything() -> None:
    az = authorizer(acl("g", OP.ALL, PERM.DENY, principal="User:*"), super_users={"User:root"})
    assert may(az, user("root"), OP.DELETE) and not may(az, ALICE, OP.DELETE)


def test_decisions_are_cached_until_the_acls_change_or_roll_back() -> None:
    registry, sec = new_cluster(SequentialIds())
    az = Authorizer(sec)
    sec.create_acls([AclCreation(binding=acl("g", OP.READ))])
    assert not may(az, BOB, OP.READ)
    mark = registry.mark()
    sec.create_acls([AclCreation(binding=acl("g", OP.READ, principal="User:bob"))])
    assert may(az, BOB, OP.READ)
    registry.rollback(mark)
    assert not may(az, BOB, OP.READ)
    sec.delete_acls([AclBindingFilter()])
    assert may(az, BOB, OP.READ)


def test_new_bindings_are_validated_with_kafkas_messages() -> None:
    cases = [
        (dict(rtype=RT.ANY), "Invalid resourceType ANY"),
        (dict(pattern=PT.MATCH), "Invalid patternType MATCH"),
        (dict(principal="alice"), "Could not parse principal from `alice`"),
        (dict(rtype=RT.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidRequestError, match=message):
            acl("g", OP.READ, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="Invalid operation ANY"):
        acl("g", OP.ANY)
    with pytest.raises(InvalidRequestError, match="Invalid permissionType ANY"):
        acl("g", OP.READ, PERM.ANY)
    with pytest.raises(InvalidRequestError, match="Resource name should not be empty"):
        acl("", OP.READ)
    with pytest.raises(InvalidRequestError, match="Invalid operation 99"):
        new_binding(
            resource_type=3,
            resource_name="g",
            pattern_type=3,
            principal="User:a",
            host="*",
            operation=99,
            permission_type=3,
        )


def test_filters_match_as_kafkas() -> None:
    lit, star, pre = (
        acl("pay-eu", OP.READ),
        acl("*", OP.READ),
        acl("pay-", OP.WRITE, pattern=PT.PREFIXED, rtype=RT.TOPIC),
    )
    every = [lit, star, pre]

    def sel(**kw) -> list:
        return [b for b in every if AclBindingFilter(**kw).matches(b)]

    assert sel() == every
    assert sel(resource_name="pay-eu") == [lit]  # ANY pattern: the exact name only
    assert sel(resource_name="pay-eu", pattern_type=PT.MATCH, resource_type=RT.GROUP) == [lit, star]
    assert sel(resource_name="pay-eu", pattern_type=PT.MATCH) == every
    assert sel(pattern_type=PT.PREFIXED) == [pre]
    assert sel(operation=OP.WRITE) == [pre]
    assert sel(principal="User:bob") == []
    assert sel(permission_type=PERM.DENY) == []
    with pytest.raises(InvalidRequestError, match="UNKNOWN"):
        new_filter(
            resource_type=0,
            resource_name=None,
            pattern_type=1,
            principal=None,
            host=None,
            operation=1,
            permission_type=1,
        )


def test_enum_names_parse_as_kafka_acls_sh_writes_them() -> None:
    assert parse_enum(AclOperation, "DescribeConfigs") is OP.DESCRIBE_CONFIGS
    assert parse_enum(AclOperation, "describe-configs") is OP.DESCRIBE_CONFIGS
    assert parse_enum(AclOperation, "read") is OP.READ
    assert parse_enum(ResourceType, "TransactionalId") is RT.TRANSACTIONAL_ID
    with pytest.raises(ValueError, match="one of ANY, ALL, READ"):
        parse_enum(AclOperation, "reed")


def test_authorizer_config_from_settings() -> None:
    cfg = AuthorizerConfig.parse("User:a; User:b;", "FALSE")
    assert cfg == AuthorizerConfig(
        super_users=frozenset({"User:a", "User:b"}), allow_everyone_if_no_acl_found=False
    )
    with pytest.raises(ValueError, match="super.users"):
        AuthorizerConfig.parse("alice")
    with pytest.raises(ValueError, match="true or false"):
        AuthorizerConfig.parse("", "yes")


def by_type(az: Authorizer, who, op=OP.WRITE, rtype=RT.TOPIC, host="10.0.0.1") -> bool:
    return az.authorize_by_resource_type(who, host, op, rtype)


def test_authorize_by_resource_type_as_kafkas_default_implementation() -> None:
    """Kafka's ``Authorizer.authorizeByResourceType`` (an idempotent producer's WRITE on some
    topic): an ALLOW that no DENY dominates; a literal ``*`` DENY dominates all, a literal DENY
    its own name, a prefixed DENY the names and prefixes it begins."""
    topic = {"rtype": RT.TOPIC}
    assert by_type(authorizer(), BOB)  # nothing at all: allow.everyone.if.no.acl.found
    assert not by_type(authorizer(allow_everyone_if_no_acl_found=False), BOB)
    assert by_type(authorizer(allow_everyone_if_no_acl_found=False, super_users={"User:bob"}), BOB)
    closed = {"allow_everyone_if_no_acl_found": False}
    bob = {"principal": "User:bob", **topic}
    assert by_type(authorizer(acl("orders", OP.WRITE, **bob), **closed), BOB)
    assert by_type(authorizer(acl("orders", OP.ALL, **bob), **closed), BOB)
    assert not by_type(authorizer(acl("orders", OP.READ, **bob), **closed), BOB)  # no implication
    assert not by_type(authorizer(acl("orders", OP.WRITE, **bob), **closed), ALICE)
    assert by_type(authorizer(acl("orders", OP.WRITE, principal="User:*", **topic), **closed), BOB)
    assert not by_type(authorizer(acl("orders", OP.WRITE, host="10.9.9.9", **bob), **closed), BOB)
    dominated = [
        (acl("orders", OP.WRITE, PERM.DENY, **bob), acl("orders", OP.WRITE, **bob)),
        (acl("*", OP.WRITE, PERM.DENY, **bob), acl("x-", OP.WRITE, pattern=PT.PREFIXED, **bob)),
        (
            acl("ord", OP.WRITE, PERM.DENY, pattern=PT.PREFIXED, **bob),
            acl("orders", OP.WRITE, **bob),
        ),
        (
            acl("or", OP.ALL, PERM.DENY, pattern=PT.PREFIXED, **bob),
            acl("ord", OP.WRITE, pattern=PT.PREFIXED, **bob),
        ),
    ]
    for deny, allow in dominated:
        assert not by_type(authorizer(deny, allow, **closed), BOB), (deny, allow)
    # A DENY that does not dominate the ALLOW leaves it standing.
    assert by_type(
        authorizer(
            acl("orders-x", OP.WRITE, PERM.DENY, pattern=PT.PREFIXED, **bob),
            acl("orders", OP.WRITE, pattern=PT.PREFIXED, **bob),
            **closed,
        ),
        BOB,
    )
    # With allow.everyone.if.no.acl.found, Kafka asks about a topic named "hardcode" first.
    assert by_type(authorizer(acl("orders", OP.READ, **bob)), BOB)
    assert not by_type(authorizer(acl("*", OP.READ, **bob)), BOB)


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_before_the_acls_are_loaded_only_super_users_are_allowed(allow_everyone: bool) -> None:
    """Kafka's StandardAuthorizer before its initial load (KIP-801): nothing is decided on
    ACLs not loaded yet — neither "no ACL: open" nor "no ACL: refused" —, super users are
    allowed; once loaded (for good), the ACLs decide."""
    loaded = [False]
    _reg, sec = new_cluster(SequentialIds())
    az = Authorizer(
        sec,
        AuthorizerConfig(
            super_users=frozenset({"User:root"}), allow_everyone_if_no_acl_found=allow_everyone
        ),
        ready=lambda: loaded[0],
    )
    assert (az.ready, az.open) == (False, False)
    assert [may(az, who, OP.READ) for who in (ALICE, ANONYMOUS, user("root"))] == [
        False,
        False,
        True,
    ]
    assert not az.authorize_by_resource_type(ALICE, "10.0.0.1", OP.WRITE, RT.TOPIC)
    loaded[0] = True
    assert (az.ready, az.open) == (True, allow_everyone)
    assert [may(az, who, OP.READ) for who in (ALICE, ANONYMOUS)] == [allow_everyone] * 2
    loaded[0] = False  # never asked again
    assert az.ready
