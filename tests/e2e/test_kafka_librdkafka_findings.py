"""What librdkafka's own consumer-group tests found against the listener in front of Tansu,
each as a test through real clients (confluent-kafka) that failed before its fix:

* test 0132 (classic): a dynamic classic member's id is Kafka's ``<client.id>-<uuid>``, so the
  client-side assignors, which order members by id, give consumers ``c0`` and ``c1`` a
  deterministic assignment (roundrobin: c0 gets 0 and 2; range: c0 gets 0 and 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_clients import STACK_SETTINGS, Fleet
from kafka_support import KafkaStack, create_topics

pytestmark = pytest.mark.slow

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStack]:
    s = KafkaStack(tmp_path_factory.mktemp("kafka-librdkafka-findings"), *STACK_SETTINGS)
    try:
        yield s
    finally:
        assert s.stop() == 0, s.server.stderr_text()


@pytest.fixture
def admin(stack: KafkaStack) -> Iterator[Any]:
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": stack.server.kafka_address})
    yield client
    del client


@pytest.fixture
def fleet(stack: KafkaStack, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(stack.server.kafka_address, tmp_path)
    yield f
    f.close()


@pytest.mark.parametrize(
    ("strategy", "c0", "c1"),
    [("roundrobin,range", {0, 2}, {1, 3}), ("range,roundrobin", {0, 1}, {2, 3})],
    ids=["roundrobin", "range"],
)
def test_classic_member_ids_order_the_client_side_assignors(
    stack: KafkaStack, fleet: Fleet, admin: Any, strategy: str, c0: set[int], c1: set[int]
) -> None:
    """librdkafka's 0132: consumers with client.id c0 and c1 and the same strategy list get the
    assignment the first strategy computes over members sorted by id: c0's first."""
    topic = f"t0132-{strategy.split(',')[0]}"
    group = f"g0132-{strategy.split(',')[0]}"
    client = stack.server.client()
    create_topics(client, **{topic: 4})
    client.close()
    for name in ("c0", "c1"):
        fleet.start(name, "librdkafka-classic", group, topics=[topic], assignor=strategy)
    got = fleet.wait_for_assignment({(topic, p) for p in range(4)}, 30, names=["c0", "c1"])
    assert got == {"c0": {(topic, p) for p in c0}, "c1": {(topic, p) for p in c1}}
    described = admin.describe_consumer_groups([group])[group].result(10)
    ids = {m.client_id: m.member_id for m in described.members}
    assert set(ids) == {"c0", "c1"}
    for name, member_id in ids.items():
        assert re.fullmatch(f"{name}-{UUID}", member_id), member_id
