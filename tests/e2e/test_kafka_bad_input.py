"""Bad input on the Kafka listener in front of a broker (Tansu): what tests/e2e/test_kafka_listener.py
checks in coordinator-only mode, now on the forwarding path — garbage, truncated and oversized
frames, unknown API keys, unsupported versions of served and forwarded APIs, a frame that never
completes, a connection that never says anything, a burst of bad connections. Kafka's answers:
ApiVersions of an unknown version gets a v0 answer with UNSUPPORTED_VERSION; everything else
closes that connection (a forwarded frame the broker cannot read: the broker closes its side, and
so do we). Never a crash or a stall: other connections keep being served, and a real consumer
and producer (the witness) run through the whole module without noticing.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_clients import STACK_SETTINGS, BackgroundProducer, Fleet
from kafka_support import KafkaStack, create_topics, encode_request, fetch_request, request
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

pytestmark = pytest.mark.slow

IDLE_MS = 1500
MAX_BYTES = 65536
WITNESS = "bi-witness"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStack]:
    s = KafkaStack(
        tmp_path_factory.mktemp("kafka-bad-input"),
        *STACK_SETTINGS,
        "--set",
        f"connections.max.idle.ms={IDLE_MS}",
        "--set",
        f"socket.request.max.bytes={MAX_BYTES}",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.server.stderr_text()


@pytest.fixture(scope="module")
def witness(
    stack: KafkaStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Fleet, BackgroundProducer]]:
    """A KIP-848 consumer (librdkafka) reading what a producer writes, all module long."""
    c = stack.server.client()
    create_topics(c, **{WITNESS: 2})
    c.close()
    fleet = Fleet(stack.server.kafka_address, tmp_path_factory.mktemp("witness"))
    fleet.start("w", "librdkafka-consumer", "g-bi-witness", topics=[WITNESS])
    fleet.wait_for_assignment({(WITNESS, 0), (WITNESS, 1)}, 30, names=["w"])
    producer = BackgroundProducer(stack.server.kafka_address, WITNESS, 2, 50, "w")
    try:
        yield fleet, producer
    finally:
        producer.stop()
        fleet.close()


def frame(key: int, version: int, body: bytes = b"", correlation_id: int = 7) -> bytes:
    """A request frame with a v1 header (client id "x") and ``body`` as it is."""
    payload = struct.pack(">hhih", key, version, correlation_id, 1) + b"x" + body
    return struct.pack(">i", len(payload)) + payload


BAD = {
    # forwarded APIs: the broker cannot read them and closes; so do we
    "produce-garbage-body": frame(0, 9, bytes(range(40))),
    "fetch-truncated-body": frame(1, 12, b"\x00\x01\x02"),
    "metadata-garbage-body": frame(3, 12, b"\xff" * 16),
    "list-offsets-truncated": frame(2, 7, b"\x00\x00"),
    # versions and keys nobody offers
    "fetch-v99": frame(1, 99),
    "list-offsets-v-1": frame(2, -1),
    "unknown-api-key": frame(999, 0),
    "negative-api-key": frame(-5, 0),
    # served APIs
    "heartbeat-truncated-body": frame(68, 1, b"\x05ab"),
    # lengths no frame could hold, nulls where the schema allows none (#30)
    "list-groups-huge-array": struct.pack(">i", 18)
    + struct.pack(">hhih", 16, 5, 1, -1)
    + b"\0\xff\xff\xff\xff\x7f\0\0",
    "describe-groups-null-groups": frame(15, 6, b"\0\0\0\0"),
    "find-coordinator-v99": frame(10, 99, b"\0"),
    "produce-v9-truncated-tags": frame(0, 9, b"\x05"),
    "heartbeat-v7": frame(68, 7),
    "join-group-garbage": frame(11, 5, b"\x7f\xff" * 10),
    # framing
    "oversized": struct.pack(">i", MAX_BYTES + 1) + b"x" * 64,
    "negative-size": struct.pack(">i", -1),
    "truncated-header": struct.pack(">i", 3) + b"\x00\x01\x02",
    "client-id-past-the-end": struct.pack(">ihhih", 10, 0, 9, 1, 500),
    "random-bytes": struct.pack(">i", 48) + bytes((i * 37) % 256 for i in range(48)),
}


@pytest.mark.parametrize("data", list(BAD.values()), ids=list(BAD))
def test_bad_input_closes_only_that_connection(
    stack: KafkaStack, witness: Any, data: bytes
) -> None:
    bad = stack.server.client()
    good = stack.server.client()
    started = time.monotonic()
    bad.send_raw(data)
    assert bad.closed_by_server(timeout=5)
    assert time.monotonic() - started < 3  # at once, not at the idle timeout
    # The listener and the broker behind it keep serving, through the same path.
    assert good.call(request(18, 3, client_software_name="t", client_software_version="1"))
    meta = good.call(
        request(
            3,
            12,
            topics=[{"name": WITNESS, "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert [(t.name, len(t.partitions)) for t in meta.topics] == [(WITNESS, 2)]
    bad.close()
    good.close()


@pytest.mark.parametrize("bad", ["join-group-garbage", "produce-v9-truncated-tags"])
def test_a_forwarded_request_ahead_of_a_bad_one_is_answered(stack: KafkaStack, bad: str) -> None:
    """A Metadata forwarded to the broker, pipelined with a JoinGroup whose body does not
    decode (or a Produce whose acks cannot be read) behind it: Kafka answers the Metadata
    before it reads the bad request and closes on it; the close came while the broker's answer
    was on its way, and it was lost. Nothing read after the bad request is answered (the
    ApiVersions behind it)."""
    c = stack.server.client()
    topic = f"bi-ahead-{bad}"
    create_topics(c, **{topic: 2})
    metadata = request(
        3,
        12,
        topics=[{"name": topic, "topic_id": None}],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    c.pending.append((1, 3, 12))  # what receive() checks the answer against
    behind = frame(18, 0, correlation_id=8)  # never read: after the bad one
    c.send_raw(encode_request(metadata, 1) + BAD[bad] + behind)
    meta = c.receive()
    assert [(t.name, int(t.error_code), len(t.partitions)) for t in meta.topics] == [(topic, 0, 2)]
    assert c.closed_by_server(timeout=5)
    c.close()


def test_api_versions_of_an_unknown_version_is_answered_in_v0(stack: KafkaStack) -> None:
    c = stack.server.client()
    c.send_raw(frame(18, 42, b"\x00\x00\x00", correlation_id=99))
    raw = c.read_frame()
    assert struct.unpack_from(">i", raw)[0] == 99
    resp, _ = entity_reader(load_response_schema(18, 0))(raw, 4)
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == E.unsupported_version
    assert keys == {18: (0, 4)}  # Kafka (KIP-511): ApiVersions' own range only
    # Kafka keeps the connection: the client retries with a version it shares.
    assert c.call(request(18, 0)).error_code == E.none
    c.close()


@pytest.mark.parametrize("started", [False, True], ids=["silent", "frame-never-completes"])
def test_a_stalled_connection_is_closed_after_the_idle_time(
    stack: KafkaStack, witness: Any, started: bool
) -> None:
    stalled = stack.server.client()
    if started:
        stalled.send_raw(frame(1, 12, b"\x00" * 20)[:-10])  # a Fetch cut short
    began = time.monotonic()
    # Meanwhile everyone else is served.
    good = stack.server.client()
    for _ in range(5):
        assert good.call(request(18, 0)).error_code == E.none
    assert stalled.closed_by_server(timeout=IDLE_MS / 1000 * 4 + 5)
    assert IDLE_MS / 1000 * 0.9 <= time.monotonic() - began < IDLE_MS / 1000 * 4 + 5
    stalled.close()
    good.close()


def test_a_burst_of_bad_connections(stack: KafkaStack, witness: Any) -> None:
    host, _, port = stack.server.kafka_address.rpartition(":")
    socks = []
    for i in range(60):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(list(BAD.values())[i % len(BAD)])
        socks.append(s)
    for s in socks:
        s.settimeout(5)
        try:
            while s.recv(65536):
                pass  # at most an answer before the close
        except ConnectionResetError:
            pass
        s.close()
    c = stack.server.client()
    assert c.call(request(18, 0)).error_code == E.none
    c.close()


def rss_mib(stack: KafkaStack) -> float:
    with open(f"/proc/{stack.server.proc.pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_fetches_pipelined_by_a_client_that_does_not_read_are_not_held_here(
    stack: KafkaStack, witness: Any
) -> None:
    """Kafka answers one request of a connection at a time, so a client that pipelines Fetches
    and reads nothing makes the broker hold one answer. Here forwarded requests go on at once:
    the broker's answers must then wait in the broker (the upstream connection stops being
    read while the client takes nothing), not in this process — 60 answers of 2 MB each grew
    it by 120 MB before. Once the client reads, every answer comes, in order."""
    from confluent_kafka import Producer

    c = stack.server.client()
    create_topics(c, **{"bi-flood": 1})
    # Batches under this stack's socket.request.max.bytes (64 KiB): one record of 50 KB each.
    producer = Producer(
        {"bootstrap.servers": stack.server.kafka_address, "linger.ms": 0, "batch.size": 60_000}
    )
    for _ in range(40):
        producer.produce("bi-flood", b"x" * 50_000, partition=0)
    assert producer.flush(30) == 0
    meta = c.call(request(3, 12, topics=[{"name": "bi-flood", "topic_id": None}]))
    topic_id = meta.topics[0].topic_id
    c.close()
    fetch = fetch_request(13, topic_id, 0, max_wait=100, max_bytes=50_000_000, replica_id=-1)
    flood = stack.server.client()
    one = flood.call(fetch)  # ~2 MB: every record
    assert len(one.responses[0].partitions[0].records) > 1_900_000
    before = rss_mib(stack)
    for _ in range(60):
        flood.send(fetch)
    grown = 0.0
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        grown = max(grown, rss_mib(stack) - before)
        time.sleep(0.05)
    assert grown < 40, f"{before:.0f} MiB -> +{grown:.0f} MiB"
    for _ in range(60):  # checks each correlation id in turn
        assert len(flood.receive().responses[0].partitions[0].records) > 1_900_000
    flood.close()


def test_the_witness_was_never_disturbed(stack: KafkaStack, witness: Any) -> None:
    fleet, producer = witness
    time.sleep(0.5)
    written = producer.stop()
    assert len(written) > 50
    fleet.wait_consumed(written, 30)
    [w] = fleet.consumers
    assert [e["event"] for e in w.events("assign", "revoke", "lost", "error")] == ["assign"]
    assert not w.events("commit-error")
    fleet.stop_all()
    log = stack.server.stderr_text()
    assert "Traceback" not in log and "Unexpected error" not in log
    assert stack.server.proc.poll() is None and stack.tansu.proc.poll() is None


def test_the_log_names_each_bad_connection(stack: KafkaStack) -> None:
    """One warning line per bad connection, saying why (no traceback)."""
    log = stack.server.stderr_text()
    for why in (
        "the upstream broker closed the connection",
        "API key 1 (fetch) v99 is not served",
        "API key 999",
        "ListGroupsRequest.states_filter: 34359738366 elements need at least",
        "DescribeGroupsRequest.groups is not nullable but was sent as null",
        "find_coordinator v99 is not known to the codec",
        "produce v9: cannot read acks: truncated varint",
        f"request of {MAX_BYTES + 1} bytes (socket.request.max.bytes is {MAX_BYTES})",
        "Closing idle Kafka connection",
    ):
        assert why in log, why
