"""KafkaJS (npm ``kafkajs`` 2.2.4, installed by scripts/bootstrap from
``tests/e2e/kafkajs/package-lock.json``) as a real client of the Kafka listener in front of
Tansu. KafkaJS speaks only the classic group protocol, with its own assignor
(``RoundRobinAssigner``, computed by the group's leader).

Each KafkaJS consumer is ``kafkajs/driver.js`` in a Node process of its own, started by
``kafka_clients.Fleet`` (kind ``kafkajs``) beside the Python workers: the same events (its
GROUP_JOIN assignments, the records it processed, its commits), so the same checks — exact sets
of records consumed, no partition owned by two members at once, offsets committed — apply.

1. Two KafkaJS consumers in one classic group share a topic, consume and commit; one of them
   stops committing, then leaves: the other gets every partition and reads again exactly the
   records the leaver processed without committing, nothing else.
2. The migration persona: a KafkaJS (classic) member and a librdkafka KIP-848 member
   (``group.protocol=consumer``) in one group — a consumer group with a classic member inside —
   split the partitions; the KafkaJS member leaves and the KIP-848 member gets everything.
3. KafkaJS's ``admin.resetOffsets`` (it commits -2, its "earliest", from a member of the group)
   takes effect: the group's next consumer reads the topic again from the start.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from typing import Any

import pytest
from kafka_clients import (
    KAFKAJS_DIR,
    Fleet,
    GroupView,
    Partition,
    committed,
    describe,
    new_topic,
    produce,
    settle,
)
from kafka_support import KafkaStack

pytestmark = pytest.mark.slow

PARTITIONS = 4
SETTLE_S = 30.0


def topic(stack: KafkaStack, name: str) -> set[Partition]:
    return new_topic(stack, name, PARTITIONS)


def wait_committed(admin: Any, fleet: Fleet, group: str, wanted: dict[Partition, int]) -> None:
    """Until ``group``'s committed offsets are ``wanted`` and the fleet has read the commit
    events that say so: a consumer prints the records it processed before it commits them,
    but the offsets can be seen committed before the test's reader thread has read those lines
    (a loaded machine), so the records consumed are checked only once their commits are read."""
    fleet.wait_for(
        lambda: committed(admin, group) == wanted and fleet_committed(fleet, wanted) == wanted,
        SETTLE_S,
        f"commits {wanted}",
    )


def fleet_committed(fleet: Fleet, partitions: Iterable[Partition]) -> dict[Partition, int]:
    """Of ``partitions``, the offsets the fleet's consumers last said they committed."""
    latest: dict[Partition, int] = {}
    for e in fleet.snapshot():
        if e["event"] == "commit":
            latest.update(((t, p), o) for t, p, o in e["offsets"])
    return {tp: latest[tp] for tp in partitions if tp in latest}


def by_consumer(fleet: Fleet, values: dict[str, tuple[int, int]]) -> dict[str, set[str]]:
    """Consumer name -> which of ``values`` it processed."""
    out: dict[str, set[str]] = {}
    for c in fleet.consumers:
        out.setdefault(c.name, set()).update(r[3] for r in c.records() if r[3] in values)
    return out


def on(values: dict[str, tuple[int, int]], owned: set[Partition], name: str) -> set[str]:
    """The values written to partitions of ``owned`` (of topic ``name``)."""
    return {v for v, (p, _o) in values.items() if (name, p) in owned}


def test_two_kafkajs_consumers_share_commit_and_hand_over(
    stack: KafkaStack, admin: Any, fleet: Fleet
) -> None:
    name, group = "kjs-share", "g-kjs-share"
    partitions = topic(stack, name)
    address, channel = stack.server.kafka_address, stack.server.channel
    fleet.start("js1", "kafkajs", group, topics=[name])
    fleet.start("js2", "kafkajs", group, topics=[name])
    owners = settle(fleet, admin, channel, group, partitions, ["js1", "js2"], "CLASSIC")
    assert sorted(len(ps) for ps in owners.values()) == [2, 2]
    # The generation both joined: one of them led it (KafkaJS's assignor ran there).
    joins = [c.events("assign")[-1] for c in fleet.consumers]
    assert {e["protocol"] for e in joins} == {"RoundRobinAssigner"}
    assert sorted(e["leader"] for e in joins) == [False, True]
    d = admin.describe_consumer_groups([group])[group].result(10)
    assert (d.type.name, d.state.name, d.partition_assignor) == (
        "CLASSIC",
        "STABLE",
        "RoundRobinAssigner",
    )
    assert sorted(m.client_id for m in d.members) == ["js1", "js2"]

    # A: each record processed once, by the owner of its partition; everything committed.
    a = produce(address, name, [f"a{i}" for i in range(40)], PARTITIONS)
    fleet.wait_consumed(a, SETTLE_S)
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 10))
    assert by_consumer(fleet, a) == {m: on(a, ps, name) for m, ps in owners.items()}

    # B: js2 processes its share without committing it.
    js2 = fleet.consumers[1]
    js2.send("hold")
    fleet.wait_for(lambda: bool(js2.events("held")), SETTLE_S, "js2 to hold its commits")
    b = produce(address, name, [f"b{i}" for i in range(40)], PARTITIONS)
    fleet.wait_consumed(b, SETTLE_S)
    wait_committed(admin, fleet, group, {p: 20 if p in owners["js1"] else 10 for p in partitions})
    assert by_consumer(fleet, b) == {m: on(b, ps, name) for m, ps in owners.items()}

    # js2 leaves: js1 owns everything and reads again exactly js2's uncommitted share of B.
    js2.stop()
    assert fleet.wait_for_assignment(partitions, SETTLE_S, names=["js1"]) == {"js1": partitions}
    assert settle(fleet, admin, channel, group, partitions, ["js1"], "CLASSIC") == {
        "js1": partitions
    }
    c = produce(address, name, [f"c{i}" for i in range(40)], PARTITIONS)
    fleet.wait_consumed(c, SETTLE_S)
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 30))
    again = on(b, owners["js2"], name)
    assert fleet.consumed() == {v: 2 if v in again else 1 for v in [*a, *b, *c]}
    js1 = fleet.consumers[0].records()
    last_join = max(e["t"] for e in fleet.consumers[0].events("assign"))
    after_join = {
        r[3]
        for e in fleet.consumers[0].events("records")
        if e["t"] > last_join
        for r in e["records"]
    }
    assert after_join == again | set(c)
    # In each partition js1 processed offsets in order, each once.
    for p in range(PARTITIONS):
        offsets = [o for t, q, o, _v in js1 if (t, q) == (name, p)]
        assert offsets == sorted(set(offsets)), (p, offsets)
    fleet.check_exclusive_ownership()

    fleet.stop_all()
    assert describe(admin, channel, group) == GroupView(
        type="CLASSIC", state="EMPTY", members={}, partitions={}, member_types={}
    )
    assert committed(admin, group) == dict.fromkeys(partitions, 30)


def test_a_kafkajs_member_and_a_kip848_member_in_one_group(
    stack: KafkaStack, admin: Any, fleet: Fleet
) -> None:
    name, group = "kjs-mixed", "g-kjs-mixed"
    partitions = topic(stack, name)
    address, channel = stack.server.kafka_address, stack.server.channel
    fleet.start("js", "kafkajs", group, topics=[name])
    assert settle(fleet, admin, channel, group, partitions, ["js"], "CLASSIC") == {"js": partitions}
    # The KIP-848 member's heartbeat turns the classic group into a consumer group (migration
    # policy bidirectional) with the KafkaJS member inside; the partitions are split.
    fleet.start("k848", "librdkafka-consumer", group, topics=[name])
    owners = settle(fleet, admin, channel, group, partitions, ["js", "k848"], "CONSUMER")
    assert sorted(len(ps) for ps in owners.values()) == [2, 2]
    view = describe(admin, channel, group)
    assert view.member_types == {"js": "classic", "k848": "consumer"}

    a = produce(address, name, [f"a{i}" for i in range(40)], PARTITIONS)
    fleet.wait_consumed(a, SETTLE_S)
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 10))
    assert by_consumer(fleet, a) == {m: on(a, ps, name) for m, ps in owners.items()}

    # The KafkaJS member leaves: the KIP-848 member gets everything, from the committed offsets.
    fleet.consumers[0].stop()
    assert settle(fleet, admin, channel, group, partitions, ["k848"], "CONSUMER") == {
        "k848": partitions
    }
    assert describe(admin, channel, group).member_types == {"k848": "consumer"}
    b = produce(address, name, [f"b{i}" for i in range(40)], PARTITIONS)
    fleet.wait_consumed(b, SETTLE_S)
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 20))
    assert fleet.consumed() == dict.fromkeys([*a, *b], 1)
    assert by_consumer(fleet, b) == {"js": set(), "k848": set(b)}
    fleet.check_exclusive_ownership()
    assert not [e for e in fleet.snapshot() if e["event"] == "lost"]

    fleet.stop_all()
    assert describe(admin, channel, group) == GroupView(
        type="CONSUMER", state="EMPTY", members={}, partitions={}, member_types={}
    )


def test_kafkajs_admin_resets_a_groups_offsets_to_the_earliest(
    stack: KafkaStack, admin: Any, fleet: Fleet
) -> None:
    """KafkaJS's admin.resetOffsets joins the group with a consumer of its own and commits -2
    to every partition, which Kafka stores as it is; the group's next consumer then reads
    everything again. The coordinator refused negative offsets (INVALID_REQUEST): KafkaJS's
    consumer crashed and the reset never ended."""
    name, group = "kjs-reset", "g-kjs-reset"
    partitions = topic(stack, name)
    address = stack.server.kafka_address
    written = produce(address, name, [f"r{i}" for i in range(40)], PARTITIONS)
    first = fleet.start("js", "kafkajs", group, topics=[name])
    fleet.wait_consumed(written, SETTLE_S)
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 10))
    first.stop()

    config = {"name": "reset", "bootstrap": address, "group": group, "topics": [name]}
    done = subprocess.run(
        [
            "node",
            str(KAFKAJS_DIR / "driver.js"),
            json.dumps(config | {"admin": "reset-offsets", "earliest": True}),
        ],
        capture_output=True,
        text=True,
        timeout=40,
    )
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    assert [json.loads(line)["event"] for line in done.stdout.splitlines()] == ["reset", "closed"]
    assert committed(admin, group) == dict.fromkeys(partitions, -2)

    again = fleet.start("js", "kafkajs", group, topics=[name])
    wait_committed(admin, fleet, group, dict.fromkeys(partitions, 10))
    assert fleet.consumed() == dict.fromkeys(written, 2)
    assert sorted(r[3] for r in again.records()) == sorted(written)
    fleet.stop_all()
