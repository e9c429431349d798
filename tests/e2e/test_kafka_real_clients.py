"""Real Kafka clients through the Kafka listener in front of Tansu: consumer groups of
librdkafka (KIP-848 and classic, eager and cooperative), kafka-python and aiokafka consume every
record written, commit, and are described correctly by the clients' own admin tools; static
membership; regex subscriptions; kafka-python's KafkaAdminClient.

Each consumer runs in a process of its own (``kafka_clients.Fleet``); its rebalance callbacks,
processed records and commits are the evidence. Every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from conftest import run_cli
from kafka_clients import (
    Fleet,
    GroupView,
    Partition,
    committed,
    describe,
    new_topic,
    produce,
    settle,
    wait_described,
    write_records,
)
from kafka_support import KafkaStack

pytestmark = pytest.mark.slow

PARTITIONS = 6
SETTLE_S = 30.0


def topic(stack: KafkaStack, name: str, partitions: int = PARTITIONS) -> set[Partition]:
    return new_topic(stack, name, partitions)


def listed(admin: Any, group: str) -> tuple[str, str] | None:
    """(type, state) of ``group`` in confluent-kafka's ListGroups, None if not listed."""
    for g in admin.list_consumer_groups().result(10).valid:
        if g.group_id == group:
            assert g.is_simple_consumer_group is False
            return g.type.name, g.state.name
    return None


# ---------------------------------------------------------------- 1 and 2: consume, commit, describe


CASES = {
    # name: (kind, assignor, group type, assignor named by describe)
    "librdkafka-kip848": ("librdkafka-consumer", None, "CONSUMER", "uniform"),
    "librdkafka-classic-eager": ("librdkafka-classic", "range", "CLASSIC", "range"),
    "librdkafka-classic-cooperative": (
        "librdkafka-classic",
        "cooperative-sticky",
        "CLASSIC",
        "cooperative-sticky",
    ),
    "kafka-python": ("kafka-python", "range", "CLASSIC", "range"),
    "aiokafka": ("aiokafka", None, "CLASSIC", "roundrobin"),  # aiokafka offers roundrobin only
}


@pytest.mark.parametrize("case", list(CASES))
def test_three_consumers_consume_commit_and_are_described(
    stack: KafkaStack, admin: Any, fleet: Fleet, case: str
) -> None:
    kind, assignor, group_type, assignor_name = CASES[case]
    name, group = f"rc-{case}", f"g-rc-{case}"
    partitions = topic(stack, name)
    address = stack.server.kafka_address
    # Half of the records before the consumers start, half once the group is stable.
    before = produce(address, name, [f"{case}-a{i}" for i in range(150)], PARTITIONS)
    members = ["c1", "c2", "c3"]
    for m in members:
        fleet.start(m, kind, group, topics=[name], assignor=assignor)
    owners = settle(fleet, admin, stack.server.channel, group, partitions, members, group_type)
    after = produce(address, name, [f"{case}-b{i}" for i in range(150)], PARTITIONS)
    fleet.wait_consumed([*before, *after], SETTLE_S)
    # Every record written after the group settled went to the owner of its partition.
    by_value = {r[3]: c.name for c in fleet.consumers for r in c.records() if r[3] in after}
    owner_of = {p: m for m, ps in owners.items() for p in ps}
    assert by_value == {v: owner_of[(name, p)] for v, (p, _o) in after.items()}
    fleet.check_exclusive_ownership()
    # Committed: 50 records per partition, all processed.
    fleet.wait_for(
        lambda: committed(admin, group) == dict.fromkeys(partitions, 50),
        SETTLE_S,
        "offsets committed to the end",
    )

    # The group as confluent-kafka's AdminClient sees it.
    assert listed(admin, group) == (group_type, "STABLE")
    d = admin.describe_consumer_groups([group])[group].result(10)
    host, _, port = address.rpartition(":")
    assert (d.group_id, d.type.name, d.state.name, d.partition_assignor) == (
        group,
        group_type,
        "STABLE",
        assignor_name,
    )
    assert (d.coordinator.host, d.coordinator.port) == (host, int(port))
    assert d.is_simple_consumer_group is False
    assert sorted((m.client_id, m.host, m.group_instance_id) for m in d.members) == [
        (m, "/127.0.0.1", None) for m in members
    ]
    assert {
        m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for m in d.members
    } == owners
    assert sorted(len(ps) for ps in owners.values()) == [2, 2, 2]
    if group_type == "CONSUMER":
        assert all(
            {(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions}
            == owners[m.client_id]
            for m in d.members
        )
        view = describe(admin, stack.server.channel, group)
        assert view.member_types == dict.fromkeys(members, "consumer")
    assert committed(admin, group) == dict.fromkeys(partitions, 50)

    fleet.stop_all()
    assert not [e for e in fleet.snapshot() if e["event"] == "lost"]
    assert listed(admin, group) == (group_type, "EMPTY")
    assert describe(admin, stack.server.channel, group) == GroupView(
        type=group_type, state="EMPTY", members={}, partitions={}, member_types={}
    )


def test_a_classic_group_of_three_different_clients(
    stack: KafkaStack, admin: Any, fleet: Fleet
) -> None:
    """librdkafka, kafka-python and aiokafka in one classic group: they share ``roundrobin``
    (the coordinator picks the protocol every member offers), consume and commit."""
    name, group = "rc-mixed", "g-rc-mixed"
    partitions = topic(stack, name)
    fleet.start("rdk", "librdkafka-classic", group, topics=[name], assignor="roundrobin")
    fleet.start("kp", "kafka-python", group, topics=[name], assignor="roundrobin")
    fleet.start("aio", "aiokafka", group, topics=[name])
    owners = settle(fleet, admin, stack.server.channel, group, partitions, ["rdk", "kp", "aio"])
    assert sorted(len(ps) for ps in owners.values()) == [2, 2, 2]
    written = produce(stack.server.kafka_address, name, [f"mx{i}" for i in range(120)], 6)
    fleet.wait_consumed(written, SETTLE_S)
    fleet.wait_for(
        lambda: committed(admin, group) == dict.fromkeys(partitions, 20),
        SETTLE_S,
        "offsets committed",
    )
    fleet.check_exclusive_ownership()
    d = admin.describe_consumer_groups([group])[group].result(10)
    assert (d.type.name, d.state.name, d.partition_assignor) == ("CLASSIC", "STABLE", "roundrobin")
    fleet.stop_all()


# ---------------------------------------------------------------- 4: static membership, regex


@pytest.mark.parametrize("kind", ["librdkafka-consumer", "librdkafka-classic"])
def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    stack: KafkaStack, admin: Any, fleet: Fleet, kind: str
) -> None:
    """A static member (``group.instance.id``) that goes away and comes back within its session
    timeout gets the same partitions back, and nobody else notices: no callback fires on the
    other members, the coordinator describes the same assignment."""
    name, group = f"rc-static-{kind}", f"g-rc-static-{kind}"
    partitions = topic(stack, name)
    classic = (
        {"assignor": "range", "session_timeout_ms": 10000} if kind != "librdkafka-consumer" else {}
    )
    members = ["s1", "s2", "s3"]
    for m in members:
        fleet.start(m, kind, group, topics=[name], instance_id=f"inst-{m}", **classic)
    before = settle(fleet, admin, stack.server.channel, group, partitions, members)
    d = admin.describe_consumer_groups([group])[group].result(10)
    assert sorted((m.client_id, m.group_instance_id) for m in d.members) == [
        (m, f"inst-{m}") for m in members
    ]
    quiet_from = len(fleet.snapshot())
    (s2,) = [c for c in fleet.live() if c.name == "s2"]
    s2.stop()
    # KIP-848: a static member's leave (epoch -2) keeps its assignment for the session timeout;
    # classic: a static member sends no LeaveGroup on close. Either way it is still a member.
    view = describe(admin, stack.server.channel, group)
    assert view.partitions.get("s2") == before["s2"], view
    again = fleet.start("s2", kind, group, topics=[name], instance_id="inst-s2", **classic)
    fleet.wait_for(lambda: again.owned() == before["s2"], SETTLE_S, "s2 to get its partitions back")
    wait_described(
        admin,
        stack.server.channel,
        group,
        lambda v: v.state == "STABLE" and v.partitions == before,
        SETTLE_S,
        f"{group} to be stable again",
    )
    assert again.events("assign") and all(
        {(t, p) for t, p in e["partitions"]} <= before["s2"] for e in again.events("assign")
    )
    disturbed = [
        e
        for e in fleet.snapshot()[quiet_from:]
        if e["name"] in ("s1", "s3") and e["event"] in ("assign", "revoke", "lost")
    ]
    assert not disturbed, disturbed
    fleet.check_exclusive_ownership()
    fleet.stop_all()


def test_a_regex_subscription_from_librdkafka(stack: KafkaStack, admin: Any, fleet: Fleet) -> None:
    """``^orders-.*`` (librdkafka sends ``(^orders-.*)``; RE2, full match): the matching topics
    are assigned, the others never are; a matching topic created later joins the assignment."""
    from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc

    group = "g-rc-regex"
    wanted = topic(stack, "orders-eu", 2) | topic(stack, "orders-us", 3)
    for other in ("ordersx", "xorders-eu", "archive.orders-eu"):
        topic(stack, other, 1)
    members = ["r1", "r2"]
    for m in members:
        fleet.start(m, "librdkafka-consumer", group, pattern="^orders-.*")
    # Full match, not search: "^orders-.." is exactly the 2-letter regions (a search would take
    # orders-apac too). librdkafka takes a subscription for a regex only if it starts with "^".
    full = fleet.start("r3", "librdkafka-consumer", "g-rc-regex-full", pattern="^orders-..")
    settle(fleet, admin, stack.server.channel, group, wanted, members, "CONSUMER")
    fleet.wait_for(lambda: full.owned() == wanted, SETTLE_S, "r3 to own orders-eu and orders-us")
    stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(stack.server.channel)
    resp = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
    )
    assert [
        (m.subscribed_topic_regex, list(m.subscribed_topic_names)) for m in resp.groups[0].members
    ] == [("(^orders-.*)", [])] * 2
    address = stack.server.kafka_address
    values = {
        t: produce(address, t, [f"{t}-{i}" for i in range(6)], 1) for t in ("orders-eu", "ordersx")
    }
    fleet.wait_consumed(values["orders-eu"], SETTLE_S)
    # A topic that matches, created while they run: assigned after the registry's refresh.
    later = topic(stack, "orders-apac", 2)
    settle(fleet, admin, stack.server.channel, group, wanted | later, members, "CONSUMER")
    assert full.owned() == wanted  # orders-apac is not two letters
    late = produce(address, "orders-apac", [f"apac-{i}" for i in range(4)], 2)
    fleet.wait_consumed(late, SETTLE_S)
    consumed_topics = {r[0] for c in fleet.consumers if c.name != "r3" for r in c.records()}
    assert consumed_topics == {"orders-eu", "orders-apac"}
    assert {r[0] for r in full.records()} == {"orders-eu"}
    assert not set(values["ordersx"]) & set(fleet.consumed())
    fleet.check_exclusive_ownership()
    fleet.stop_all()


# ---------------------------------------------------------------- 5: kafka-python's admin client


def test_kafka_python_admin_client(stack: KafkaStack, fleet: Fleet) -> None:
    """kafka-python's KafkaAdminClient on a KIP-848 group (librdkafka) and a classic group
    (kafka-python): list (with Kafka's type and state filters), describe, list offsets; delete
    refused while they have members; then, once they are empty, alter, reset (to the earliest,
    to the latest — ListOffsets forwarded to the broker — and to an offset), delete offsets,
    delete the groups."""
    from kafka.admin import KafkaAdminClient, OffsetSpec
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata, TopicPartition

    name, g848, gcl = "rc-admin", "g-rc-admin-848", "g-rc-admin-classic"
    topic(stack, name, 3)
    write_records(stack.server.kafka_address, name, {0: 10, 1: 10, 2: 10})
    values = [f"{name}-{p}-{i}" for p in range(3) for i in range(10)]
    fleet.start("k848", "librdkafka-consumer", g848, topics=[name])
    fleet.start("kcl", "kafka-python", gcl, topics=[name], assignor="range")
    fleet.wait_for(
        lambda: all(
            {(t, p): o for e in c.events("commit") for t, p, o in e["offsets"]}
            == {(name, p): 10 for p in range(3)}
            for c in fleet.consumers
        ),
        SETTLE_S,
        "both groups to commit everything",
    )
    assert all(fleet.consumed().get(v) == 2 for v in values)  # once per group
    admin = KafkaAdminClient(bootstrap_servers=stack.server.kafka_address, request_timeout_ms=20000)
    tp = [TopicPartition(name, p) for p in range(3)]
    try:
        ours = {g848, gcl}

        def listed(**filters: Any) -> list[tuple[str, str, str, str]]:
            return sorted(
                (g["group_id"], g["group_type"], g["group_state"], g["protocol_type"])
                for g in admin.list_groups(**filters)
                if g["group_id"] in ours
            )

        assert listed() == [
            (g848, "consumer", "Stable", "consumer"),
            (gcl, "classic", "Stable", "consumer"),
        ]
        assert listed(types_filter=["consumer"]) == [(g848, "consumer", "Stable", "consumer")]
        assert listed(types_filter=["classic"], states_filter=["Stable"]) == [
            (gcl, "classic", "Stable", "consumer")
        ]
        assert listed(states_filter=["Empty"]) == []

        # kafka-python asks DescribeGroups v6: the KIP-848 group is not a classic group (Dead,
        # GROUP_ID_NOT_FOUND with Kafka's message, nothing else).
        described = admin.describe_groups([g848, gcl, "g-rc-admin-nope"])
        d = described[gcl]
        assert (d["error"], d["group_state"], d["protocol_type"], d["protocol_data"]) == (
            None,
            "Stable",
            "consumer",
            "range",
        )
        [m] = d["members"]
        assert (m["client_id"], m["client_host"], m["group_instance_id"]) == (
            "kcl",
            "/127.0.0.1",
            None,
        )
        assert m["member_metadata"]["topics"] == [name]
        everything = {"assigned_partitions": [{"topic": name, "partitions": [0, 1, 2]}]}
        assert {k: m["member_assignment"][k] for k in everything} == everything
        dead = {
            "error": f"[Error 69] GroupIdNotFoundError: Group {g848} is not a classic group.",
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
        }
        assert {k: described[g848][k] for k in (*dead, "members")} == {**dead, "members": []}
        nope = described["g-rc-admin-nope"]
        assert (nope["group_state"], nope["members"], nope["error"]) == (
            "Dead",
            [],
            "[Error 69] GroupIdNotFoundError: Group g-rc-admin-nope not found.",
        )
        assert admin.list_group_offsets([g848, gcl]) == {
            g: {t: OffsetAndMetadata(10, "", -1) for t in tp} for g in (g848, gcl)
        }
        # Members: not deleted (and their offsets stay).
        assert admin.delete_groups([g848, gcl]) == {
            g848: "NonEmptyGroupError",
            gcl: "NonEmptyGroupError",
        }
        assert len(admin.list_group_offsets(gcl)[gcl]) == 3

        fleet.stop_all()
        assert listed() == [
            (g848, "consumer", "Empty", "consumer"),
            (gcl, "classic", "Empty", "consumer"),
        ]
        assert admin.alter_group_offsets(g848, {tp[0]: OffsetAndMetadata(3, "m", -1)}) == {
            tp[0]: NoError
        }
        assert admin.list_group_offsets(g848)[g848][tp[0]] == OffsetAndMetadata(3, "m", -1)
        reset = admin.reset_group_offsets(gcl, dict.fromkeys(tp, OffsetSpec.EARLIEST))
        assert reset == {t: {"error": NoError, "offset": 0} for t in tp}
        reset = admin.reset_group_offsets(gcl, {tp[0]: OffsetSpec.LATEST, tp[1]: 4, tp[2]: 99})
        assert reset == {  # an explicit offset past the log end is clamped to it
            tp[0]: {"error": NoError, "offset": 10},
            tp[1]: {"error": NoError, "offset": 4},
            tp[2]: {"error": NoError, "offset": 10},
        }
        assert admin.delete_group_offsets(gcl, [tp[2]]) == {tp[2]: NoError}
        assert admin.list_group_offsets(gcl)[gcl] == {
            tp[0]: OffsetAndMetadata(10, "", -1),
            tp[1]: OffsetAndMetadata(4, "", -1),
        }
        assert admin.delete_groups([g848, gcl, "g-rc-admin-nope"]) == {
            g848: "OK",
            gcl: "OK",
            "g-rc-admin-nope": "GroupIdNotFoundError",
        }
        assert listed() == []
        assert admin.list_group_offsets([g848, gcl]) == {g848: {}, gcl: {}}
    finally:
        admin.close()


# ---------------------------------------------------------------- 6: kip848 groups describe


def test_groups_describe_shows_a_classic_groups_members_and_generation(
    stack: KafkaStack, fleet: Fleet
) -> None:
    """Two kafka-python members in a classic group: ``kip848 groups describe --members``
    shows both (it showed none and no generation), with their clients, hosts and assigned
    partitions read from the embedded consumer protocol, and the group's generation — as a
    table and as JSON."""
    name, group = "rc-describe", "g-rc-describe-classic"
    topic(stack, name, 4)
    fleet.start("kp1", "kafka-python", group, topics=[name], assignor="range")
    fleet.start("kp2", "kafka-python", group, topics=[name], assignor="range")
    owned = fleet.wait_for_assignment({(name, p) for p in range(4)}, SETTLE_S)
    address = stack.server.grpc_address

    def cli_describe(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("groups", "describe", group, *args, "--bootstrap-server", address)

    done = cli_describe("--state", "--members", "--output", "json")
    assert done.returncode == 0, done.stderr
    [described] = json.loads(done.stdout)
    generation = described["group_epoch"]
    assert isinstance(generation, int) and generation >= 1
    assert {k: described[k] for k in ("group_type", "group_state", "assignor_name")} == {
        "group_type": "classic",
        "group_state": "Stable",
        "assignor_name": "range",
    }
    members = sorted(described["members"], key=lambda m: m["client_id"])
    assert [(m["client_id"], m["client_host"], m["member_type"]) for m in members] == [
        ("kp1", "/127.0.0.1", 0),
        ("kp2", "/127.0.0.1", 0),
    ]
    assert all(m["member_epoch"] == generation for m in members)
    assert all(m["subscribed_topic_names"] == [name] for m in members)
    shown = {
        m["client_id"]: {(a["topic_name"], p) for a in m["assignment"] for p in a["partitions"]}
        for m in members
    }
    assert shown == owned
    table = cli_describe("--state", "--members")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0] == (
        f"GROUP {group}  type classic  state Stable  generation {generation}  assignor range"
        "  members 2"
    )
    assert rows[2].split() == [
        "MEMBER",
        "EPOCH",
        "TYPE",
        "CLIENT",
        "HOST",
        "INSTANCE",
        "#PARTITIONS",
    ]
    by_client = {row.split()[3]: row.split() for row in rows[3:]}
    for m in members:
        assert by_client[m["client_id"]] == [
            m["member_id"],
            str(generation),
            "classic",
            m["client_id"],
            "/127.0.0.1",
            "-",
            str(len(owned[m["client_id"]])),
        ]
