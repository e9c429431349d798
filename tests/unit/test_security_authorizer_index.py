"""The authorizer's ACL index after a change: derived from the last one and the ACLs changed
(coordinator/security/authorizer.py ``_Index.derived``, metadata.py ``acl_changes``), never
every ACL indexed again; it decides exactly as an index built whole, and an index handed out
(:meth:`Authorizer.pinned`) keeps deciding over its own generation."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_security_authorizer import acl as authorizer_acl

from coordinator.core.commands import SequentialIds
from coordinator.factory import new_cluster
from coordinator.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.authorizer import Authorizer, _decide, _Index
from coordinator.security.metadata import AclCreation, SecurityMetadata
from coordinator.security.principal import user

OP, RT, PT, PERM = AclOperation, ResourceType, PatternType, AclPermissionType


def acl(
    name: str,
    op: AclOperation = OP.READ,
    perm: AclPermissionType = PERM.ALLOW,
    *,
    rtype: ResourceType = RT.TOPIC,
    **kw: Any,
) -> AclBinding:
    """test_security_authorizer's ACL, by default a topic's READ."""
    binding: AclBinding = authorizer_acl(name, op, perm, rtype=rtype, **kw)
    return binding


def exact(b: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=b.resource_type,
        resource_name=b.resource_name,
        pattern_type=b.pattern_type,
        principal=b.principal,
        host=b.host,
        operation=b.operation,
        permission_type=b.permission_type,
    )


class Counting:
    """Counts the ACLs the authorizer reads from the metadata (every one: a whole rebuild)."""

    def __init__(self, sec: SecurityMetadata) -> None:
        self.read = 0
        original = sec.acls

        def acls() -> Iterator[AclBinding]:
            for b in original():
                self.read += 1
                yield b

        sec.acls = acls  # type: ignore[method-assign]


def contents(index: _Index) -> tuple[list[str], list[str]]:
    literal = sorted(f"{k}:{b}" for k, acls in index.literal.items() for b in acls)
    prefixed = sorted(f"{k}:{b}" for k, acls in index.prefixed.items() for b in acls)
    assert all(index.literal.values()) and all(index.prefixed.values())  # no empty list kept
    return literal, prefixed


N = 2_000


def test_one_acl_added_or_removed_does_not_index_every_acl_again() -> None:
    _registry, sec = new_cluster(SequentialIds())
    sec.create_acls(
        [AclCreation(binding=acl(f"t{i}", principal=f"User:u{i}")) for i in range(N)]
        + [AclCreation(binding=acl("t", pattern=PT.PREFIXED))]
    )
    az = Authorizer(sec)
    counting = Counting(sec)
    alice = user("alice")
    assert az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert counting.read == N + 1  # the first decision builds the index whole
    assert az._index.visited == N + 1

    added = acl("t7", OP.ALL, PERM.DENY)
    sec.create_acls([AclCreation(binding=added)])
    assert not az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert counting.read == N + 1  # no ACL read again
    assert az._index.visited == 2  # t7's one ACL copied, the DENY added

    sec.delete_acls([exact(added), exact(acl("t", pattern=PT.PREFIXED))])
    assert not az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")  # u7's ACL only now
    assert az.authorize(user("u7"), "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert counting.read == N + 1
    assert az._index.visited == (2 + 1) + (1 + 1)  # each list copied, one ACL removed
    assert contents(az._index) == contents(_Index(sec.acls()))


def test_a_rollback_or_many_changes_build_the_index_whole() -> None:
    registry, sec = new_cluster(SequentialIds())
    sec.create_acls([AclCreation(binding=acl(f"t{i}")) for i in range(10)])
    az = Authorizer(sec)
    alice, bob = user("alice"), user("bob")
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    mark = registry.mark()
    sec.create_acls([AclCreation(binding=acl("t1", principal="User:bob"))])
    assert az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    assert az._index.visited == 2
    registry.rollback(mark)
    assert sec.acl_changes(az._generation) is None  # the generation seen was rolled back
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    assert az._index.visited == 10  # built whole
    sec.create_acls([AclCreation(binding=acl(f"x{i}")) for i in range(1_001)])
    assert az.authorize(alice, "", OP.READ, RT.TOPIC, "x1000")
    assert az._index.visited == 1_011  # more than DERIVE_LIMIT changes: built whole


def test_a_pinned_index_keeps_deciding_over_its_generation() -> None:
    _registry, sec = new_cluster(SequentialIds())
    sec.create_acls(
        [
            AclCreation(binding=acl("t1")),
            AclCreation(binding=acl("p", pattern=PT.PREFIXED, principal="User:bob")),
        ]
    )
    az = Authorizer(sec)
    alice, bob = user("alice"), user("bob")
    pinned = az.pinned()
    before = contents(az._index)
    sec.create_acls(
        [
            AclCreation(binding=acl("t1", perm=PERM.DENY)),
            AclCreation(binding=acl("p", pattern=PT.PREFIXED, perm=PERM.DENY, principal="User:*")),
        ]
    )
    sec.delete_acls([exact(acl("t1"))])
    assert not az.authorize(alice, "", OP.READ, RT.TOPIC, "t1")
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "p1")
    assert pinned(alice, "", OP.READ, RT.TOPIC, "t1")
    assert pinned(bob, "", OP.READ, RT.TOPIC, "p1")
    assert contents(pinned.args[0]) == before  # type: ignore[attr-defined]


NAMES = ["a", "ab", "abc", "b", "*"]
BINDINGS = [
    acl(name, op, perm, principal=who, rtype=rtype, pattern=pattern, host=host)
    for name, op, perm, who, rtype, pattern, host in itertools.product(
        NAMES,
        [OP.READ, OP.ALL, OP.DESCRIBE],
        [PERM.ALLOW, PERM.DENY],
        ["User:alice", "User:*"],
        [RT.TOPIC, RT.GROUP],
        [PT.LITERAL, PT.PREFIXED],
        ["*", "10.0.0.1"],
    )
    if not (pattern is PT.PREFIXED and name == "*")
]
QUESTIONS = list(
    itertools.product(
        [user("alice"), user("bob")],
        ["/10.0.0.1", "/10.0.0.2"],
        [OP.READ, OP.DESCRIBE, OP.WRITE],
        [RT.TOPIC, RT.GROUP],
        ["a", "ab", "abc", "abd", "b", "c", "*"],
    )
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.sampled_from(BINDINGS), min_size=1, max_size=4)),
        min_size=1,
        max_size=12,
    ),
    st.sets(st.integers(0, 11)),
)
def test_a_derived_index_decides_as_one_built_whole(steps, asks) -> None:
    registry, sec = new_cluster(SequentialIds())
    az = Authorizer(sec)
    pins = []
    for i, (create, bindings) in enumerate(steps):
        if create:
            sec.create_acls([AclCreation(binding=b) for b in bindings])
        else:
            sec.delete_acls([exact(b) for b in bindings])
        if i in asks or i == len(steps) - 1:
            az.authorize(user("alice"), "", OP.READ, RT.TOPIC, "a")  # derive now
            pins.append((az.pinned(), _Index(sec.acls())))
            assert contents(az._index) == contents(pins[-1][1])
            for q in QUESTIONS:
                assert az.authorize(*q) == _decide(pins[-1][1], az.config, *q), q
            for who, host, op, rtype, _name in QUESTIONS[::7]:
                by_type = az.authorize_by_resource_type(who, host, op, rtype)
                fresh = Authorizer(sec, az.config)
                assert by_type == fresh.authorize_by_resource_type(who, host, op, rtype)
    for pinned, whole in pins:  # each handed-out index still decides as of its generation
        for q in QUESTIONS:
            if pinned.__class__.__name__ == "partial":
                assert pinned(*q) == _decide(whole, az.config, *q)
