"""Kafka's per-API authorization rules in the service layer (coordinator/server/authorization.py)
beyond the matrix's allow/refuse of whole requests: topic rules inside a request (subscriptions,
regexes per principal, offsets per partition, ConsumerGroupDescribe's topics), the filtered
lists (ListGroups, ListTopics), hosts, and every refusal reported for the audit trail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from builders import commit, join, make_runtime

from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import ErrorCode
from coordinator.core.offsets import OffsetFetchGroup, OffsetFetchTopic
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.authorizer import AuthorizerConfig, Refusal
from coordinator.security.principal import user
from coordinator.server.api import AclSpec, Caller, TopicChanges
from coordinator.server.service import CoordinatorService
from legacy_bridge import messages as m

ADMIN = Caller(principal=user("admin"))
EVERY_ACL = AclSpec(  # a filter: ANY (1) of each
    resource_type=1,
    resource_name=None,
    pattern_type=1,
    principal=None,
    host=None,
    operation=1,
    permission_type=1,
)
ALICE = Caller(principal=user("alice"), client_host="/10.0.0.7", client_id="app")
OP = AclOperation


def acl(
    rtype: int,
    name: str,
    op: AclOperation,
    principal: str = "User:alice",
    pattern: int = 3,
    host: str = "*",
    permission: int = 3,
) -> AclSpec:
    return AclSpec(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=int(op),
        permission_type=permission,
    )


@pytest.fixture
async def svc() -> AsyncIterator[tuple[CoordinatorService, list[Refusal]]]:
    rt: CoordinatorRuntime = make_runtime()
    await rt.start()
    service = CoordinatorService(
        rt, authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))
    )
    refusals: list[Refusal] = []
    service.authorizer.on_refused = refusals.append
    topics = [NewTopic(name=n, num_partitions=2) for n in ("pay-eu", "pay-us", "secret", "public")]
    created = await service.create_topics(TopicChanges(entries=topics), ADMIN)
    assert all(t.error_code == 0 for t in created.value or [])
    try:
        yield service, refusals
    finally:
        await rt.close()


async def grant(service: CoordinatorService, *specs: AclSpec) -> None:
    reply = await service.create_acls(list(specs), ADMIN)
    assert [c.error_code for c in reply.value or []] == [0] * len(specs)


async def test_a_subscription_to_a_topic_the_member_may_not_describe_is_refused(svc) -> None:
    service, refusals = svc
    await grant(
        service,
        acl(3, "g", OP.READ),
        acl(2, "pay-", OP.DESCRIBE, pattern=4),
        acl(2, "secret", OP.READ, principal="User:other"),  # "secret" has ACLs: only they decide
    )
    before = service.runtime.snapshot()
    reply = await service.consumer_group_heartbeat(join("g", ("pay-eu", "secret")), ALICE)
    assert (reply.error_code, reply.error_message) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "Not authorized to access topics: [secret]",
    )
    assert service.runtime.snapshot() == before
    assert [(r.api, r.operation, r.resource_type, r.resource_name) for r in refusals] == [
        ("ConsumerGroupHeartbeat", OP.DESCRIBE, ResourceType.TOPIC, "secret")
    ]
    assert (refusals[0].principal, refusals[0].host, refusals[0].protocol) == (
        user("alice"),
        "10.0.0.7",
        "grpc",
    )
    ok = await service.consumer_group_heartbeat(join("g", ("pay-eu", "pay-us")), ALICE)
    assert ok.error_code == 0 and ok.value is not None
    assert ok.value.assignment is not None


async def resolution(service: CoordinatorService, group_id: str, regex: str) -> frozenset[str]:
    """The group's resolution of ``regex``, once the runtime has run it (off the heartbeat
    path, right after the heartbeat that asked for it); bounded."""
    group = service.runtime.shards[service.runtime.shard_index(group_id)].groups[group_id]
    for _ in range(200):
        resolved = group.resolved_regexes.get(regex)
        if resolved is not None:
            return resolved[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"{regex} was never resolved")


async def test_a_regex_resolves_only_to_topics_the_member_may_describe(svc) -> None:
    service, refusals = svc
    await grant(service, acl(3, "g", OP.READ), acl(2, "pay-eu", OP.READ))
    req: ConsumerGroupHeartbeat = replace(
        join("g", ()), subscribed_topic_names=None, subscribed_topic_regex="pay-.*|secret"
    )
    reply = await service.consumer_group_heartbeat(req, ALICE)
    assert reply.error_code == 0 and reply.value is not None
    (group,) = (await service.consumer_group_describe(["g"], ADMIN)).value or []
    assert group.description is not None
    # pay-eu: READ implies DESCRIBE; pay-us and secret have no ACL at all, but TOPIC ACLs
    # exist only for pay-eu, so allow.everyone lets alice describe them: Kafka's semantics.
    assert await resolution(service, "g", "pay-.*|secret") == {"pay-eu", "pay-us", "secret"}
    assert refusals == []  # a regex resolution filters silently


async def test_a_regex_resolution_drops_topics_an_acl_hides(svc) -> None:
    service, refusals = svc
    await grant(
        service,
        acl(3, "g", OP.READ),
        acl(2, "*", OP.DESCRIBE, principal="User:other"),  # TOPIC ACLs everywhere
        acl(2, "pay-", OP.DESCRIBE, pattern=4),
    )
    req = replace(join("g", ()), subscribed_topic_names=None, subscribed_topic_regex=".*")
    reply = await service.consumer_group_heartbeat(req, ALICE)
    assert reply.error_code == 0
    assert await resolution(service, "g", ".*") == {"pay-eu", "pay-us"}
    assert refusals == []


async def test_offsets_are_authorized_per_topic(svc) -> None:
    service, refusals = svc
    await grant(
        service,
        acl(3, "g", OP.READ),
        acl(2, "*", OP.DESCRIBE, principal="User:other"),
        acl(2, "public", OP.READ),
    )
    reply = await service.offset_commit(commit("g", {("public", 0): 5, ("secret", 1): 9}), ALICE)
    assert reply.value is not None
    # Kafka's order (KafkaApis.handleOffsetCommitRequest): the refused topics first, then the
    # coordinator's answer (before: the order of the request).
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in reply.value.topics
    ] == [
        ("secret", [(1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]),
        ("public", [(0, ErrorCode.NONE)]),
    ]
    await service.offset_commit(commit("g", {("secret", 0): 3}), ADMIN)
    # "All topics": the topics alice may not describe are left out, silently.
    (fetched,) = (await service.offset_fetch([OffsetFetchGroup(group_id="g")], ALICE)).value or []
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched.topics] == [
        ("public", [5])
    ]
    # Named topics: TOPIC_AUTHORIZATION_FAILED on each partition of the hidden one, after the
    # others (Kafka's order: KafkaApis appends them to the coordinator's answer).
    named = OffsetFetchGroup(
        group_id="g",
        topics=(
            OffsetFetchTopic(name="secret", partition_indexes=(0,)),
            OffsetFetchTopic(name="public", partition_indexes=(0,)),
        ),
    )
    (fetched,) = (await service.offset_fetch([named], ALICE)).value or []
    assert [
        (t.name, [(p.committed_offset, p.error_code) for p in t.partitions]) for t in fetched.topics
    ] == [
        ("public", [(5, ErrorCode.NONE)]),
        ("secret", [(-1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]),
    ]
    # OffsetDelete (Kafka: GROUP DELETE, then READ per topic): the refused topics first.
    await grant(service, acl(3, "g", OP.DELETE))
    deleted = (await service.offset_delete(("g", [("public", [0]), ("secret", [0])]), ALICE)).value
    assert deleted is not None
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in deleted.topics
    ] == [
        ("secret", [(0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]),
        ("public", [(0, ErrorCode.NONE)]),
    ]
    assert {(r.api, r.resource_name) for r in refusals} == {
        ("OffsetCommit", "secret"),
        ("OffsetFetch", "secret"),
        ("OffsetDelete", "secret"),
    }


async def test_list_groups_shows_what_the_caller_may_describe_and_all_with_cluster_describe(
    svc,
) -> None:
    service, _ = svc
    for g in ("a", "b", "c"):
        await service.offset_commit(commit(g, {("public", 0): 1}), ADMIN)
    assert len((await service.list_groups(((), ()), ALICE)).value or []) == 3  # no ACL at all
    await grant(
        service,
        acl(4, "kafka-cluster", OP.ALTER, principal="User:ops"),  # alice: no CLUSTER DESCRIBE
        acl(3, "a", OP.READ),
        acl(3, "c", OP.DELETE, principal="User:*"),
    )
    listed = (await service.list_groups(((), ()), ALICE)).value or []
    # a: READ implies DESCRIBE; b: no ACL (allow.everyone); c: ACLs exist, alice's DELETE
    # through User:* implies DESCRIBE.
    assert [g.group_id for g in listed] == ["a", "b", "c"]
    await grant(service, acl(3, "b", OP.READ, principal="User:other"))
    assert [g.group_id for g in (await service.list_groups(((), ()), ALICE)).value or []] == [
        "a",
        "c",
    ]
    await grant(service, acl(4, "kafka-cluster", OP.DESCRIBE))
    assert len((await service.list_groups(((), ()), ALICE)).value or []) == 3
    # ANONYMOUS: only c (User:* may DELETE it, which implies DESCRIBE).
    assert [g.group_id for g in (await service.list_groups(((), ()), Caller())).value or []] == [
        "c"
    ]


async def test_describing_a_group_needs_describe_on_its_members_topics(svc) -> None:
    service, _ = svc
    assert (await service.consumer_group_heartbeat(join("g", ("secret",)), ADMIN)).error_code == 0
    await grant(
        service,
        acl(3, "g", OP.DESCRIBE),
        acl(2, "secret", OP.READ, principal="User:other"),
    )
    (described,) = (await service.consumer_group_describe(["g"], ALICE)).value or []
    assert (described.error_code, described.description) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        None,
    )
    await grant(service, acl(2, "secret", OP.DESCRIBE))
    (described,) = (await service.consumer_group_describe(["g"], ALICE)).value or []
    assert described.error_code == 0 and described.description is not None


async def test_host_specific_acls_need_the_clients_address(svc) -> None:
    service, _ = svc
    await grant(
        service,
        acl(3, "g", OP.ALL),
        acl(3, "g", OP.READ, host="10.0.0.7", permission=2),  # DENY from that host
    )
    denied = await service.consumer_group_heartbeat(join("g", ("public",)), ALICE)
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    elsewhere = replace(ALICE, client_host="/10.0.0.8")
    assert (
        await service.consumer_group_heartbeat(join("g", ("public",)), elsewhere)
    ).error_code == 0


async def test_a_refused_describe_cluster_is_reported(svc) -> None:
    """DescribeCluster (DESCRIBE on the cluster) refused is a refusal like any other: answered
    CLUSTER_AUTHORIZATION_FAILED and reported for the audit trail and the metrics. Before, it
    was decided silently, as a filter is."""
    service, refusals = svc
    await grant(service, acl(4, "kafka-cluster", OP.ALTER, principal="User:other"))
    reply = await service.describe_cluster(None, ALICE)
    assert (reply.error_code, reply.error_message, reply.value) == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "Cluster authorization failed.",
        None,
    )
    assert [
        (r.api, r.operation, r.resource_type, r.resource_name, r.principal, r.host)
        for r in refusals
    ] == [
        (
            "DescribeCluster",
            OP.DESCRIBE,
            ResourceType.CLUSTER,
            "kafka-cluster",
            user("alice"),
            "10.0.0.7",
        )
    ]


async def test_acl_administration_is_validated_per_entry(svc) -> None:
    service, _ = svc
    reply = await service.create_acls(
        [acl(3, "g", OP.READ), acl(4, "other-cluster", OP.ALTER), acl(3, "g", OP.ANY)], ADMIN
    )
    assert [(c.error_code, c.error_message) for c in reply.value or []] == [
        (ErrorCode.NONE, None),
        (
            ErrorCode.INVALID_REQUEST,
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (ErrorCode.INVALID_REQUEST, "Invalid operation ANY"),
    ]
    listed = (await service.describe_acls(EVERY_ACL, ADMIN)).value or []
    assert [str(b) for b in listed] == [
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) on GROUP:LITERAL:g"
    ]
    bad = replace(EVERY_ACL, pattern_type=0)
    assert (await service.describe_acls(bad, ADMIN)).error_code == ErrorCode.INVALID_REQUEST
    deleted = await service.delete_acls([EVERY_ACL, bad], ADMIN)
    assert [(len(d.deleted), d.error_code) for d in deleted.value or []] == [
        (1, ErrorCode.NONE),
        (0, ErrorCode.INVALID_REQUEST),
    ]


def test_a_refusal_is_an_audit_line_and_a_counted_metric(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from coordinator.observability.metrics import CoordinatorMetrics
    from coordinator.observability.requests import refusal_observer

    metrics = CoordinatorMetrics(process_collectors=False)
    refused = refusal_observer(metrics)
    caplog.set_level(logging.INFO, logger="kip848.audit")
    refused(
        Refusal(
            principal=user("bob"),
            host="10.0.0.9",
            operation=OP.READ,
            resource_type=ResourceType.GROUP,
            resource_name="payments",
            api="JoinGroup",
            client_id="rdkafka",
            protocol="kafka",
        )
    )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kip848.audit"]
    assert line == (
        "Audit: action=authorization_refused result=GROUP_AUTHORIZATION_FAILED "
        "client_id=rdkafka client_address=10.0.0.9 protocol=kafka principal=User:bob "
        "rpc=JoinGroup operation=READ resource=GROUP:payments"
    )
    sample = metrics.registry.get_sample_value(
        "kip848_authorization_refusals_total",
        {"rpc": "JoinGroup", "operation": "READ", "resource_type": "GROUP"},
    )
    assert sample == 1.0


async def test_a_syncgroup_v5_without_its_protocol_is_refused_before_it_is_authorized(
    svc,
) -> None:
    """SyncGroup v5+ must name its protocol type and name: Kafka's KafkaApis answers one that
    does not INCONSISTENT_GROUP_PROTOCOL before it authorizes anything (no refusal reported,
    whoever sends it); v4 and older have neither and are authorized as usual. Before, such a
    v5 request was authorized first (GROUP_AUTHORIZATION_FAILED for a client refused the group)
    and, from a client allowed it, taken as naming nothing (served)."""
    service, refusals = svc
    await grant(service, acl(3, "g", OP.READ, principal="User:other"))  # not alice
    unnamed = m.SyncGroup(group_id="g", generation_id=1, member_id="m", protocol_type="consumer")
    for caller in (replace(ALICE, api_version=5), replace(ADMIN, api_version=5)):
        answer = await service.sync_group(unnamed, caller)
        assert answer == m.SyncGroupResponse(
            error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            error_message="SyncGroup v5 and later must name the protocol type and name.",
        )
    assert refusals == []
    old = await service.sync_group(
        replace(unnamed, protocol_type=None), replace(ALICE, api_version=4)
    )
    assert old.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert [r.api for r in refusals] == ["SyncGroup"]


async def test_offset_delete_answers_refused_and_unknown_topics_in_the_request_s_order(
    svc,
) -> None:
    """KafkaApis.handleOffsetDeleteRequest answers, topic by topic in the order of the request,
    a refused topic TOPIC_AUTHORIZATION_FAILED, an unknown one UNKNOWN_TOPIC_OR_PARTITION and a
    known topic's partitions that do not exist UNKNOWN_TOPIC_OR_PARTITION; the coordinator's
    answer is merged in after (a topic already answered gets its other partitions appended).
    Before, the refused topics came first, whatever their place in the request."""
    service, _ = svc
    await grant(
        service,
        acl(3, "g", OP.DELETE),
        acl(2, "public", OP.READ),
        acl(2, "nope", OP.READ),
        acl(2, "pay-eu", OP.READ),
        acl(2, "secret", OP.READ, principal="User:other"),
    )
    await service.offset_commit(commit("g", {("public", 0): 5, ("pay-eu", 1): 7}), ADMIN)
    asked = [("pay-eu", [1]), ("nope", [0]), ("secret", [0]), ("public", [0, 9])]
    deleted = (await service.offset_delete(("g", asked), ALICE)).value
    assert deleted is not None
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in deleted.topics
    ] == [
        ("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("secret", [(0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]),
        ("public", [(9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (0, ErrorCode.NONE)]),
        ("pay-eu", [(1, ErrorCode.NONE)]),
    ]


async def test_an_offset_commit_looks_up_only_the_topics_it_may_commit_to(svc) -> None:
    """Where topics come from an upstream broker, a commit naming topics the registry lacks has
    them looked up there first (a topic the broker just auto-created). Kafka authorizes each
    topic before anything else: a refused name is answered TOPIC_AUTHORIZATION_FAILED without
    being looked up (before, every name was, refused or not: a round trip to the broker for a
    commit that could only be refused). Topics named by id are looked up first: their names
    decide."""
    service, _ = svc
    await grant(
        service,
        acl(3, "g", OP.READ),
        acl(2, "public", OP.READ),
        acl(2, "fresh", OP.READ),
        acl(2, "secret", OP.READ, principal="User:other"),
    )
    looked_up: list[tuple[list[str], list[str]]] = []
    registry = service.topics

    class Upstream:
        def __getattr__(self, name: str) -> Any:
            return getattr(registry, name)

        def lookup(self, names: Any, topic_ids: Any) -> None:
            looked_up.append((sorted(names), sorted(topic_ids)))

    service.topics = Upstream()  # type: ignore[assignment]
    reply = await service.offset_commit(
        commit("g", {("public", 0): 5, ("secret", 0): 9, ("fresh", 0): 1}), ALICE
    )
    assert reply.value is not None
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in reply.value.topics
    ] == [
        ("secret", [(0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]),
        ("fresh", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),  # not found upstream either
        ("public", [(0, ErrorCode.NONE)]),
    ]
    assert [names for names, _ids in looked_up if names] == [["fresh", "public"]]
