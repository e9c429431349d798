"""An append of the cluster log that deletes something and creates it again — a topic (another
topic id), an ACL, a SCRAM credential (another password), a group config (another value), a
transactional id's group (another group) — applied in parts (``Partitions._apply_in_parts``)
with each deletion and its re-creation in different parts: every read between two parts sees
the state before the append or after it, never the gap between (the topic gone, the ACL's
decision refused, the user unknown, the default config, the id unrouted). The ACLs' index is
kept across the removal and the re-adding of one ACL in the staged copy (never built whole).
On the memory store."""

from __future__ import annotations

from typing import Any

import pytest
from builders import LoopSteps
from cluster_log_steps import append_records, count_replays, reads_while_catching_up, shared_memory
from test_cluster_log_reload import SESSION_TIMEOUT, Node, node
from test_security_authorizer_index import whole_builds

from coordinator.core import records as r
from coordinator.runtime import partitions as partitions_module
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.principal import user
from coordinator.security.scram import ScramCredential, ScramMechanism, credential_from_password

SHA256 = ScramMechanism.SCRAM_SHA_256
READ_OF_T = r.AccessControlEntryKey(2, "t", 3, "User:u0", "*", 3, 3)  # u0 may READ topic t


def credential(password: str) -> ScramCredential:
    return credential_from_password(SHA256, password, f"salt-{password}".encode(), 4096)


def credential_record(password: str | None) -> r.Record:
    """u0's SCRAM-SHA-256 credential of ``password`` (None: its tombstone)."""
    if password is None:
        return r.scram_credential_record("u0", int(SHA256), None)
    c = credential(password)
    value = r.UserScramCredentialValue(
        salt=c.salt, stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations
    )
    return r.scram_credential_record("u0", int(SHA256), value)


def timeout(value: str | None) -> r.Record:
    return r.config_record(r.CONFIG_RESOURCE_GROUP, "g1", SESSION_TIMEOUT, value)


CREATED = [
    r.topic_record("x", "id-of-x", 1),
    r.acl_record(READ_OF_T, True),
    credential_record("first"),
    timeout("50000"),
    r.transactional_id_group_record("tx", "g1", 5),
]
REPLACED = [
    r.topic_record("x", None),
    r.acl_record(READ_OF_T, False),
    credential_record(None),
    timeout(None),
    r.transactional_id_group_record("tx", None),
    r.topic_record("x", "id-of-new-x", 2),
    r.acl_record(READ_OF_T, True),
    credential_record("second"),
    timeout("60000"),
    r.transactional_id_group_record("tx", "g2", 6),
]
"""Ten records: with steps of three, parts (x, READ, u0), (50000, tx, new x), (READ, u0,
60000), (tx): each deletion and its re-creation in different parts."""


def reads(n: Node) -> tuple[Any, ...]:
    """Every read of the five on node ``n``: the topics (the committed copy's, with their ids
    and partitions, and those its groups see), the authorizer's decision of u0's READ of t,
    u0's credential (SASL/SCRAM), the group config DescribeConfigs and the heartbeats read,
    the transactional id's group, the committed copy's records."""
    rt = n.rt
    shard = rt.driver.shards[0]
    return (
        tuple((t.name, t.topic_id, t.num_partitions) for t in rt.committed.registry.list_topics()),
        tuple(sorted((name, t.topic_id) for name, t in shard.context.topics.by_name.items())),
        n.service.authorizer.authorize(
            user("u0"), "/10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t"
        ),
        n.service.scram_credential("u0", SHA256),
        repr(rt.committed.group_configs.overrides("g1")),
        repr(shard.group_configs.overrides("g1")),
        rt.transactional_id_group("tx"),
        len(rt.committed.records),
    )


async def test_what_an_append_deletes_and_creates_again_in_other_parts_is_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", 3, raising=False)
    _shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await append_records(writer, CREATED)
        await behind.follow(writer)
        before = reads(behind)
        assert before == (
            (("x", "id-of-x", 1),),
            (("x", "id-of-x"),),
            True,
            credential("first"),
            repr({SESSION_TIMEOUT: "50000"}),
            repr({SESSION_TIMEOUT: "50000"}),
            "g1",
            5,
        )
        builds = whole_builds(monkeypatch)
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        await writer.rt.advance_time(1)  # an append of its own
        await append_records(writer, REPLACED)
        with LoopSteps() as steps:
            seen = set(await reads_while_catching_up(behind, writer, reads))
        after = reads(behind)
        assert [sum(n.values()) for n in replayed.values()] == [3, 3, 3, 3, 3, 3, 1, 1]
        assert [list(n) for n in replayed.values()] == [["registry"], ["committed"]] * 4
        assert seen | {after} == {before, after}
        assert after == (
            (("x", "id-of-new-x", 2),),
            (("x", "id-of-new-x"),),
            True,
            credential("second"),
            repr({SESSION_TIMEOUT: "60000"}),
            repr({SESSION_TIMEOUT: "60000"}),
            "g2",
            5,
        )
        assert builds == []
        assert reads(writer) == after
        assert await behind.state() == await writer.state()
        async with node(open_store, 3) as fresh:
            # (but its groups' topics: no partition served, none loaded)
            assert reads(fresh)[:1] + reads(fresh)[2:] == after[:1] + after[2:]
            assert await fresh.state() == await behind.state()
