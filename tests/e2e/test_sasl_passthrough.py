"""Pass-through: the coordinator in front of a broker that authenticates its own clients
(docs/security.md, "Pass-through"). The broker is a real Tansu behind a SASL-checking stand-in
(``sasl_upstream.SaslGate``: this Tansu build cannot authenticate), reached over TLS. The
coordinator signs in to it as itself for its own connections (topic feed), relays each client's
SASL exchange on that client's own upstream connection, accepts the client only if the broker
does, and serves the group APIs as the principal of the exchange.

Real clients: confluent-kafka with SCRAM-SHA-512 produces and consumes in a group; kafka-python
with PLAIN; a wrong password is refused by the broker, and so by the listener. The gate's log
proves that nothing reached the broker before its connection authenticated, nor as somebody
else."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from certs import TestCa
from kafka_clients import close_producer
from kafka_support import KafkaServer, Tansu
from sasl_upstream import SaslGate
from test_sasl import auth_error

USERS = {"alice": "alice-secret", "bob": "bob-secret", "coordinator": "coord-secret"}
TOPIC = "pt-orders"


class Stack:
    def __init__(self, root: Path) -> None:
        ca = TestCa(str(root))
        gate_pem = ca.server("gate")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(gate_pem.both)
        self.tansu = Tansu(root)
        self.gate = SaslGate(self.tansu.address, USERS, tls=context)
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="coordinator" password="coord-secret";'
        )
        try:
            self.server = KafkaServer(
                root / "data",
                "--kafka-upstream",
                self.gate.address,
                "--kafka-security-protocol",
                "SASL_PLAINTEXT",
                "--set",
                "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
                "--set",
                "kafka.upstream.security.protocol=SASL_SSL",
                "--set",
                f"kafka.upstream.ssl.truststore.location={ca.ca_file}",
                "--set",
                "kafka.upstream.sasl.mechanism=SCRAM-SHA-512",
                "--set",
                f"kafka.upstream.sasl.jaas.config={jaas}",
                "--set",
                "kafka.upstream.sasl.passthrough=true",
                clock="system",
            )
        except BaseException:
            self.gate.stop()
            self.tansu.stop()
            raise

    def stop(self) -> int:
        try:
            return self.server.stop()
        finally:
            self.gate.stop()
            self.tansu.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(tmp_path_factory.mktemp("passthrough"))
    yield made
    assert made.stop() == 0


def scram_config(stack: Stack, password: str = "alice-secret") -> dict[str, object]:
    return {
        "bootstrap.servers": stack.server.kafka_address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": password,
    }


@pytest.mark.slow
def test_confluent_kafka_through_passthrough(stack: Stack) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(scram_config(stack))
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)], operation_timeout=10).values():
        future.result(timeout=30)
    producer = Producer(scram_config(stack))
    try:
        for i in range(20):
            producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
    finally:
        close_producer(producer)
    consumer = Consumer(
        {
            **scram_config(stack),
            "group.id": "pt-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(20))
    with stack.gate.lock:
        principals = {who for who, _key in stack.gate.relayed}
        keys_as_alice = {key for who, key in stack.gate.relayed if who == "alice"}
    # The coordinator's own connections signed in as itself; the clients' as alice; nobody
    # reached the broker unauthenticated (the gate would have refused and logged it).
    assert principals == {"alice", "coordinator"}
    assert {0, 1, 19} <= keys_as_alice  # Produce, Fetch, CreateTopics relayed as alice
    assert not any("before authentication" in r for r in stack.gate.refused)


def test_a_client_the_broker_refuses_is_refused(stack: Stack) -> None:
    assert "Authentication failed" in auth_error(scram_config(stack, "wrong"))
    assert any("Authentication failed" in r for r in stack.gate.refused)


def test_kafka_python_plain_through_passthrough(stack: Stack) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=stack.server.kafka_address,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password="bob-secret",
        group_id="pt-bob",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    try:
        topics = consumer.topics()
        assert "pt-bob-topic" not in topics  # Metadata relayed as bob
        with stack.gate.lock:
            assert any(who == "bob" and key == 3 for who, key in stack.gate.relayed)
    finally:
        consumer.close()
