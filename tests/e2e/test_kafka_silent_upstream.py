"""A forwarded request the upstream broker never answers (``kafka.upstream.request.timeout.ms``,
docs/kafka.md "Forwarded"): a real ``kip848 serve`` in front of a fake broker that accepts
clients' connections and reads their requests but never answers them, and a real client
(librdkafka). The listener closes the stuck connections once the timeout has passed, so the
client's own retries reconnect; once the broker answers again the client gets its answer,
and the timeouts are counted (``error="REQUEST_TIMED_OUT"``)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from fake_upstream import TOPIC, FakeCluster
from kafka_support import KafkaServer

from coordinator.observability.metrics import parse_families


@pytest.fixture()
def silent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeCluster, KafkaServer]]:
    cluster = FakeCluster(data=True)  # keeps what is produced
    cluster.add_node(1)
    try:
        server = KafkaServer(
            tmp_path_factory.mktemp("silent") / "data",
            "--kafka-upstream",
            cluster.nodes[1].address,
            "--set",
            "kafka.upstream.request.timeout.ms=1000",
            "--metrics-listen",
            "127.0.0.1:0",
            clock="system",
        )
        try:
            yield cluster, server
        finally:
            assert server.stop() == 0, server.stderr_text()
    finally:
        cluster.stop()


def timed_out(server: KafkaServer, rpc: str) -> float:
    """Forwarded ``rpc`` requests counted REQUEST_TIMED_OUT."""
    assert server.metrics_address is not None
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as r:
        families = parse_families(r.read().decode())
    return sum(
        s.value
        for s in families.get("kip848_request_duration_seconds", [])
        if s.name.endswith("_count")
        and s.labels.get("rpc") == rpc
        and s.labels.get("route") == "forwarded"
        and s.labels.get("error") == "REQUEST_TIMED_OUT"
    )


def test_a_librdkafka_producer_delivers_once_a_silent_upstream_answers_again(
    silent: tuple[FakeCluster, KafkaServer],
) -> None:
    """A librdkafka producer's first Metadata request reaches a broker that reads it and does
    not answer; the broker answers again 0.3 s later. Before, librdkafka waited on that
    connection until its own socket.timeout.ms (60 s), so nothing was delivered in 20 s. Now the
    listener closes the stuck connection after 1 s, librdkafka reconnects, asks again and
    delivers its message."""
    from confluent_kafka import Producer

    cluster, server = silent
    cluster.silent = True
    stop = threading.Event()

    def heal() -> None:  # once the first request is stuck
        while not stop.is_set() and not cluster.stuck:
            time.sleep(0.01)
        time.sleep(0.3)
        cluster.silent = False

    healer = threading.Thread(target=heal, daemon=True)
    delivered: list[tuple[object, int]] = []
    healer.start()
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": server.kafka_address, "client.id": "timeout-test"})
    try:
        producer.produce(
            TOPIC, b"v", partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset()))
        )
        left = producer.flush(20)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        healer.join(5)
        producer.flush(10)
        producer.close()
    assert (left, delivered) == (0, [(None, 0)])
    assert 1.0 <= elapsed < 10.0, elapsed
    assert cluster.stuck == 1  # asked, dropped after 1 s, asked again: answered
    assert timed_out(server, "Metadata") >= 1
    log = server.stderr_text()
    assert "kafka.upstream.request.timeout.ms (1000 ms)" in log, log
