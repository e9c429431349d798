"""The authorizer's ACL index (coordinator/security/acl_index.py, metadata.py ``acl_index``):
built whole once, where the ACLs were loaded (a node's loader thread, never its loop), then
kept in step as ACL records are replayed, never every ACL indexed again (however many change
between two decisions); it decides exactly as an index built whole, and an index handed out
(:meth:`Authorizer.pinned`) keeps deciding over its own generation."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from builders import make_runtime
from hypothesis import given, settings
from hypothesis import strategies as st
from test_security_authorizer import acl as authorizer_acl
from test_server_authorization import acl as acl_spec
from test_server_authorization import grant

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.factory import new_cluster
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from coordinator.security import acl_index
from coordinator.security.acl_index import AclIndex
from coordinator.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.authorizer import Authorizer, AuthorizerConfig, _decide
from coordinator.security.metadata import AclCreation
from coordinator.security.principal import user
from coordinator.server.service import CoordinatorService

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


def whole_builds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every index built whole from every ACL from now on: whether on this (the loop's)
    thread."""
    builds: list[bool] = []
    loop_thread, build = threading.get_ident(), acl_index.AclIndexer.__init__

    def watched(self: Any, *args: Any) -> None:
        builds.append(threading.get_ident() == loop_thread)
        build(self, *args)

    monkeypatch.setattr(acl_index.AclIndexer, "__init__", watched)
    return builds


def contents(index: AclIndex) -> tuple[list[str], list[str]]:
    literal = sorted(f"{k}:{b}" for k, acls in index.literal.items() for b in acls)
    prefixed = sorted(f"{k}:{b}" for k, acls in index.prefixed.items() for b in acls)
    assert all(index.literal.values()) and all(index.prefixed.values())  # no empty list kept
    return literal, prefixed


N = 2_000


def test_one_acl_added_or_removed_does_not_index_every_acl_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _registry, sec = new_cluster(SequentialIds())
    sec.create_acls(
        [AclCreation(binding=acl(f"t{i}", principal=f"User:u{i}")) for i in range(N)]
        + [AclCreation(binding=acl("t", pattern=PT.PREFIXED))]
    )
    az = Authorizer(sec)
    builds = whole_builds(monkeypatch)
    alice = user("alice")
    assert az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert len(builds) == 1  # nobody built it before: the first decision builds it whole
    assert az._index.visited == N + 1

    added = acl("t7", OP.ALL, PERM.DENY)
    sec.create_acls([AclCreation(binding=added)])
    assert not az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert len(builds) == 1  # no ACL read again
    assert az._index.visited == 2  # t7's one ACL copied, the DENY added

    sec.delete_acls([exact(added), exact(acl("t", pattern=PT.PREFIXED))])
    assert not az.authorize(alice, "", OP.DESCRIBE, RT.TOPIC, "t7")  # u7's ACL only now
    assert az.authorize(user("u7"), "", OP.DESCRIBE, RT.TOPIC, "t7")
    assert len(builds) == 1
    assert az._index.visited == (2 + 1) + (1 + 1)  # each list copied, one ACL removed
    assert contents(az._index) == contents(AclIndex(sec.acls()))


def test_many_changes_between_two_decisions_are_indexed_as_they_are_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,500 ACLs added between two decisions (a node catching up on others' appends, a large
    CreateAcls): each placed in the next index as its record is replayed, none of the 2,000
    before read again. Before, past 1,000 changes the next decision built the index whole
    from every ACL (3,500 placed at once)."""
    _registry, sec = new_cluster(SequentialIds())
    sec.create_acls([AclCreation(binding=acl(f"t{i}")) for i in range(N)])
    az = Authorizer(sec)
    builds = whole_builds(monkeypatch)
    alice, bob = user("alice"), user("bob")
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t7")
    assert len(builds) == 1
    sec.create_acls([AclCreation(binding=acl(f"x{i}", principal="User:bob")) for i in range(1_500)])
    assert az.authorize(bob, "", OP.READ, RT.TOPIC, "x7")
    assert not az.authorize(alice, "", OP.READ, RT.TOPIC, "x7")
    assert len(builds) == 1
    assert az._index.visited == 1_500  # each new ACL placed once, no list copied
    assert contents(az._index) == contents(AclIndex(sec.acls()))


def test_a_rollback_builds_the_index_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy that rolls back (the registry's own: its write failed) has its index built
    again; the committed copy the server's authorizer reads never rolls back."""
    registry, sec = new_cluster(SequentialIds())
    sec.create_acls([AclCreation(binding=acl(f"t{i}")) for i in range(10)])
    az = Authorizer(sec)
    builds = whole_builds(monkeypatch)
    bob = user("bob")
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    mark = registry.mark()
    sec.create_acls([AclCreation(binding=acl("t1", principal="User:bob"))])
    assert az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    assert az._index.visited == 2
    registry.rollback(mark)
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    assert az._index.visited == 10  # built whole
    assert len(builds) == 2
    mark = registry.mark()
    sec.create_acls([AclCreation(binding=acl("t1", principal="User:bob"))])
    registry.rollback(mark)  # rolled back before any decision: the next ACL replayed sees it
    sec.create_acls([AclCreation(binding=acl("t2", principal="User:bob"))])
    assert not az.authorize(bob, "", OP.READ, RT.TOPIC, "t1")
    assert az.authorize(bob, "", OP.READ, RT.TOPIC, "t2")
    assert len(builds) == 3 and az._index.visited == 11
    assert contents(az._index) == contents(AclIndex(sec.acls()))


def cluster_store(bindings: list[tuple[str, str]]) -> MemoryRecordStore:
    """A store whose cluster log holds a topic READ ACL for each (topic, user), 100 an
    append."""
    store = MemoryRecordStore(partitions=2)
    records = [
        r.acl_record(r.AccessControlEntryKey(2, name, 3, f"User:{who}", "*", 3, 3), True)
        for name, who in bindings
    ]
    for at in range(0, len(records), 100):
        part = records[at : at + 100]
        store.append([StoredRecord(*codec.encode(rec), rec.group_id) for rec in part], at)
    return store


async def test_a_node_builds_the_index_on_its_loader_thread_and_keeps_it_on_its_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node started over 3,000 ACLs builds their index whole once, on the loader thread
    that loads them; its first decisions on the loop find it ready, and a CreateAcls of 1,500
    more ACLs is placed in the next index as its records become durable: no index is built
    whole on the loop. Before, the first decision after the load built it whole on the loop
    (at 100,000 ACLs 34 ms in one step), and again the first after the 1,500 changes."""
    builds = whole_builds(monkeypatch)
    rt = make_runtime(cluster_store([(f"t{i}", f"u{i}") for i in range(3_000)]))
    await rt.start()
    try:
        service = CoordinatorService(
            rt, authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))
        )
        az = service.authorizer
        assert builds == [False]  # on the loader thread, with the load
        assert az.authorize(user("u7"), "", OP.READ, RT.TOPIC, "t7")
        assert not az.authorize(user("u8"), "", OP.READ, RT.TOPIC, "t7")
        assert builds == [False]
        await grant(service, *(acl_spec(2, f"x{i}", OP.READ) for i in range(1_500)))
        assert az.authorize(user("alice"), "", OP.READ, RT.TOPIC, "x1499")
        assert not az.authorize(user("alice"), "", OP.READ, RT.TOPIC, "t7")
        assert builds == [False]
        assert az._index.visited == 1_500
        assert contents(az._index) == contents(AclIndex(rt.committed.security.acls()))
    finally:
        await rt.close()


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
            pins.append((az.pinned(), AclIndex(sec.acls())))
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
