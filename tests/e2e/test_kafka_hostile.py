"""Hostile clients against a real ``kip848 serve --kafka-listen`` (coordinator-only mode): a
request whose lengths no frame could hold, nulls where the schema allows none, versions the
codec does not know. Each gets what Kafka gives — its connection closed, with one WARNING line
saying why — and never a crash, a traceback or a line above WARNING; the server keeps serving
everyone else, and a member of another group heartbeats throughout."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from chaos import kafka_samples
from kafka_support import KafkaServer, encode_request, request
from kio.schema.errors import ErrorCode as E

from coordinator.server.kafka import wire

LIST_GROUPS_22 = (
    struct.pack(">i", 18) + struct.pack(">hhih", 16, 5, 1, -1) + b"\0" + b"\xff\xff\xff\xff\x7f\0\0"
)
"""ListGroups v5 whose ``states_filter`` announces 34 billion entries: 22 bytes that made the
process abort (exit 134) trying to allocate 256 GiB before this was fixed."""
LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)$")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(tmp_path_factory.mktemp("kafka-hostile") / "data")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


class Witness:
    """A KIP-848 member of another group, joined once: ``beat()`` sends its steady heartbeat."""

    def __init__(self, server: KafkaServer) -> None:
        server.create_topic("hostile-witness", 2)
        self.client = server.client("witness")
        joined = self.client.call(
            request(
                68,
                1,
                group_id="hostile-witness",
                member_id="d2l0bmVzcy1tZW1iZXIhIQ",
                member_epoch=0,
                rebalance_timeout=30000,
                subscribed_topic_names=["hostile-witness"],
                subscribed_topic_regex=None,
                topic_partitions=[],
            )
        )
        assert joined.error_code == E.none, joined
        self.member_id, self.epoch = joined.member_id, joined.member_epoch

    def beat(self) -> None:
        resp = self.client.call(
            request(
                68, 1, group_id="hostile-witness", member_id=self.member_id, member_epoch=self.epoch
            )
        )
        assert (resp.error_code, resp.member_epoch) == (E.none, self.epoch), resp

    def commit(self, offset: int) -> None:
        resp = self.client.call(
            request(
                8,
                9,
                group_id="hostile-witness",
                generation_id_or_member_epoch=self.epoch,
                member_id=self.member_id,
                topics=[
                    {
                        "name": "hostile-witness",
                        "partitions": [{"partition_index": 0, "committed_offset": offset}],
                    }
                ],
            )
        )
        codes = [p.error_code for t in resp.topics for p in t.partitions]
        assert codes == [E.none], resp


@pytest.fixture(scope="module")
def witness(server: KafkaServer) -> Iterator[Witness]:
    w = Witness(server)
    yield w
    w.client.close()


def log_lines(server: KafkaServer) -> list[tuple[str, str]]:
    """(level, message) of every log line; a line that is not one (a traceback) as ("?", it)."""
    out = []
    for line in server.stderr_text().splitlines():
        m = LOG_LINE.match(line)
        out.append((m["level"], m["message"]) if m else ("?", line))
    return out


def warnings_since(server: KafkaServer, mark: int) -> list[str]:
    """The log's new lines since ``mark`` lines: all must be WARNING (or quieter) and none may
    be a traceback; returns the WARNING messages."""
    new = log_lines(server)[mark:]
    loud = [(level, text) for level, text in new if level not in ("INFO", "DEBUG", "WARNING")]
    assert loud == [], loud[:5]
    return [text for level, text in new if level == "WARNING"]


def closes_with_one_warning(server: KafkaServer, witness: Witness, data: bytes, why: str) -> None:
    mark = len(log_lines(server))
    bad = server.client()
    bad.send_raw(data)
    assert bad.closed_by_server(timeout=5)
    bad.close()
    witness.beat()
    warned = warnings_since(server, mark)
    assert len(warned) == 1 and why in warned[0], warned
    assert server.proc.poll() is None


def test_the_22_byte_list_groups_request_closes_its_connection_and_nothing_else(
    server: KafkaServer, witness: Witness
) -> None:
    closes_with_one_warning(
        server,
        witness,
        LIST_GROUPS_22,
        "list_groups v5: ListGroupsRequest.states_filter: 34359738366 elements need at least "
        "34359738366 bytes, 2 left",
    )
    c = server.client()
    listed = c.call(request(16, 5, states_filter=[], types_filter=[]))
    assert listed.error_code == E.none and "hostile-witness" in [g.group_id for g in listed.groups]
    c.close()


TOO_LONG = re.compile(r"elements need at least|bytes, -?\d+ left|tagged fields in")


def huge_length_frames() -> Iterator[tuple[str, bytes]]:
    """For every API and version the listener serves: its fullest request with its first
    length (an array's, else a string's, else the tagged fields') replaced by one no frame
    could hold — a 5-byte varint of 34 billion in flexible versions, int32 2^31-1 or int16
    2^15-1 in the others — found as the first offset where that patch is refused as too long
    for the frame."""
    for key, version in kafka_samples.served_requests():
        frame = kafka_samples.request_frame(key, version)[4:]
        _k, _v, _c, _client, start = wire.parse_header(frame)
        start = wire.body_offset(frame, key, version, start)
        if wire.request_flexible(key, version):
            patches = [(b"\xff\xff\xff\xff\x7f", 1)]
        else:
            patches = [(b"\x7f\xff\xff\xff", 4), (b"\x7f\xff", 2)]
        found = None
        for patch, width in patches:
            for at in range(start, len(frame)):
                mutated = frame[:at] + patch + frame[at + width :]
                try:
                    wire.decode(key, version, mutated, start)
                except wire.WireError as exc:
                    if TOO_LONG.search(str(exc)):
                        found = mutated
                        break
            if found is not None:
                yield f"{wire.api_name(key)} v{version}", struct.pack(">i", len(found)) + found
                break


def test_a_huge_length_in_every_served_api_and_version_is_refused(
    server: KafkaServer, witness: Witness
) -> None:
    frames = list(huge_length_frames())
    names = [name for name, _data in frames]
    without_lengths = ["list_groups v0", "list_groups v1", "list_groups v2"]
    without_lengths += ["api_versions v0", "api_versions v1", "api_versions v2"]
    expected = [
        f"{wire.api_name(key)} v{version}" for key, version in kafka_samples.served_requests()
    ]
    assert names == [name for name in expected if name not in without_lengths]
    mark = len(log_lines(server))
    for name, data in frames:
        bad = server.client()
        bad.send_raw(data)
        assert bad.closed_by_server(timeout=5), name
        bad.close()
    witness.beat()
    warned = warnings_since(server, mark)
    assert len(warned) == len(frames)
    for name, line in zip(names, warned, strict=True):
        assert f"{name}: " in line and TOO_LONG.search(line), (name, line)
    assert server.proc.poll() is None


def describe_groups_v0(count: int) -> bytes:
    """A DescribeGroups v0 frame naming ``count`` groups, each "g" (3 bytes a group)."""
    body = struct.pack(">i", count) + b"\0\x01g" * count
    payload = struct.pack(">hhih", 15, 0, 7, -1) + body
    return struct.pack(">i", len(payload)) + payload


def test_a_request_naming_millions_of_elements_is_refused_before_it_is_decoded(
    server: KafkaServer, witness: Witness
) -> None:
    """A 15 MB DescribeGroups of 5 million groups (and a 90 MB OffsetCommit of 5 million
    partitions, which held the loop 68 s and grew the process by 2.3 GB) cost the loop in
    proportion to their elements — decoding, the service's refusal of each one over the
    request limits, the answer. Past twice what the limits allow (plus one per known topic)
    the request is refused before it is decoded: its connection closed with one warning, the
    witness answered meanwhile. Below that, over the limits, it is answered in-band."""
    mark = len(log_lines(server))
    began = time.monotonic()
    closes_with_one_warning(
        server,
        witness,
        describe_groups_v0(5_000_000),
        "describe_groups v0: DescribeGroupsRequest.groups: more array elements than one request "
        "may hold",
    )
    assert time.monotonic() - began < 5
    c = server.client()
    answer = c.call(request(15, 0, groups=[f"g{i}" for i in range(10_001)]))
    assert answer == wire.build(
        wire.response_class(15, 0),
        groups=[
            {"error_code": E.invalid_request, "group_id": f"g{i}", "group_state": ""}
            for i in range(10_001)
        ],
    )
    c.close()
    warnings_since(server, mark)


# ---------------------------------------------------------------- clients that do not read


def rss_mib(server: KafkaServer) -> float:
    with open(f"/proc/{server.proc.pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def api_versions_frames(count: int, first_id: int = 1) -> bytes:
    """``count`` ApiVersions v3 requests, correlation ids from ``first_id``."""
    one = encode_request(
        request(18, 3, client_software_name="pipeliner", client_software_version="1"), 0
    )
    head, tail = one[:8], one[12:]  # size, key, version | correlation id | the rest
    return b"".join(head + struct.pack(">i", first_id + i) + tail for i in range(count))


class Pipeliner:
    """Sends ``data`` on a connection of its own from a thread, reading nothing: it blocks
    once the server stops reading (TCP's flow control) until the socket is closed."""

    def __init__(self, server: KafkaServer, data: bytes) -> None:
        host, _, port = server.kafka_address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sent_all = False
        self.thread = threading.Thread(target=self._send, args=(data,), daemon=True)
        self.thread.start()

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
            self.sent_all = True
        except OSError:
            pass  # closed under it

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked sendall (close alone does not)
        self.thread.join(timeout=10)
        self.sock.close()
        assert not self.thread.is_alive()


def test_a_client_that_pipelines_and_never_reads_holds_up_no_other_group(
    server: KafkaServer, witness: Witness
) -> None:
    """200,000 ApiVersions pipelined on one connection that reads nothing (the test that froze
    every group for 21-54 s and grew the process by 125 MB): another group's member heartbeats
    and commits throughout with bounded latency, the process does not grow, and once the
    pipeliner goes the server is as it was."""
    mark = len(log_lines(server))
    witness.beat()
    before = rss_mib(server)
    bad = Pipeliner(server, api_versions_frames(200_000))
    latencies = []
    deadline = time.monotonic() + 4
    offset = 0
    while time.monotonic() < deadline:
        began = time.monotonic()
        witness.beat()
        offset += 1
        witness.commit(offset)
        latencies.append(time.monotonic() - began)
        time.sleep(0.005)
    grown = rss_mib(server) - before
    bad.close()
    assert len(latencies) > 50
    assert max(latencies) < 1.0, sorted(latencies)[-5:]
    assert grown < 40, f"{before:.0f} MiB -> +{grown:.0f} MiB"
    witness.beat()
    assert warnings_since(server, mark) == []


def rx_queue(server: KafkaServer, client: socket.socket) -> int:
    """Bytes the kernel holds for the server on ``client``'s connection, not read by it yet
    (``/proc/net/tcp``'s rx_queue of the server's end)."""
    server_port = int(server.kafka_address.rpartition(":")[2])
    client_port = client.getsockname()[1]
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == (
                client_port
            ):
                return int(fields[4].split(":")[1], 16)
    raise AssertionError("connection not found")


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """A server with small per-connection limits."""
    s = KafkaServer(
        tmp_path_factory.mktemp("kafka-tight") / "data",
        "--set",
        "queued.max.requests=4",
        "--set",
        "kafka.connection.max.unsent.bytes=4096",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def test_requests_behind_a_parked_join_stay_unread_up_to_the_limit(tight: KafkaServer) -> None:
    """``queued.max.requests``: behind a JoinGroup waiting at its barrier, the server reads a
    few requests and then stops reading the connection (what the client sends waits in the
    kernel, as in front of Kafka, which reads one request at a time); once the join is
    answered, everything is read and answered, in order."""
    tight.create_topic("hostile-park", 1)
    c = tight.client()
    join = dict(
        group_id="hostile-park",
        session_timeout=30000,
        rebalance_timeout=30000,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b"\0\0\0\0\0\0\0\0\0\0"}],
        reason=None,
    )
    first = c.call(request(11, 7, member_id="", **join))
    assert first.error_code == E.member_id_required
    c.send(request(11, 7, member_id=first.member_id, **join))
    pipelined = api_versions_frames(40_000, first_id=10_000)  # ~1.5 MB
    sender = threading.Thread(target=c.sock.sendall, args=(pipelined,), daemon=True)
    sender.start()
    deadline = time.monotonic() + 10
    while rx_queue(tight, c.sock) < 64 * 1024:
        assert time.monotonic() < deadline, rx_queue(tight, c.sock)
        time.sleep(0.05)
    time.sleep(0.5)
    assert rx_queue(tight, c.sock) >= 64 * 1024  # still unread: the server stopped reading
    tight.advance(3000)  # group.initial.rebalance.delay.ms: the join is answered
    joined = c.receive()
    assert joined.error_code == E.none
    for i in range(40_000):
        frame = c.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 10_000 + i
    sender.join(timeout=10)
    c.close()


def test_answers_a_client_did_not_take_are_all_there_when_it_reads(tight: KafkaServer) -> None:
    """``kafka.connection.max.unsent.bytes``: a client that pipelines 20,000 requests and reads
    nothing for a second gets every answer, in order, once it reads."""
    c = tight.client()
    sender = threading.Thread(
        target=c.sock.sendall, args=(api_versions_frames(20_000, first_id=500),), daemon=True
    )
    sender.start()
    time.sleep(1)
    for i in range(20_000):
        frame = c.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 500 + i
    sender.join(timeout=10)
    c.close()
    assert "Traceback" not in tight.stderr_text()


# ---------------------------------------------------------------- nulls where none is allowed


def null_array_frame(key: int, version: int, path: tuple[str, ...]) -> bytes:
    """The fullest request of ``key`` v``version`` with the array at ``path`` (a top-level
    field, or a field of the first element of one) written as null: compact length 0 or int32
    -1. Found as the first byte where the request with that array empty and with one element
    differ — its length."""
    cls = wire.request_class(key, version)
    sample = kafka_samples.sample(cls)

    def replace(entity: Any, path: tuple[str, ...], value: list[Any]) -> Any:
        name, rest = path[0], path[1:]
        old = getattr(entity, name)
        new = value if not rest else [replace(old[0], rest, value), *old[1:]]
        return wire.build(type(entity), {**vars_of(entity), name: new})

    def element(entity: Any, path: tuple[str, ...]) -> Any:
        value = getattr(entity, path[0])
        return value[0] if len(path) == 1 else element(value[0], path[1:])

    one = element(sample, path)
    empty = kafka_samples.request_frame(key, version, replace(sample, path, []))[4:]
    single = kafka_samples.request_frame(key, version, replace(sample, path, [one]))[4:]
    at = next(i for i, (a, b) in enumerate(zip(empty, single, strict=False)) if a != b)
    if wire.request_flexible(key, version):
        body = empty[:at] + b"\0" + empty[at + 1 :]
    else:
        body = empty[: at - 3] + b"\xff\xff\xff\xff" + empty[at + 1 :]
    return struct.pack(">i", len(body)) + body


def vars_of(entity: Any) -> dict[str, Any]:
    return {name: getattr(entity, name) for name in entity.__dataclass_fields__}


@pytest.mark.parametrize(
    ("key", "version", "path", "field"),
    [
        (16, 5, ("states_filter",), "ListGroupsRequest.states_filter"),
        (8, 9, ("topics",), "OffsetCommitRequest.topics"),
        (8, 9, ("topics", "partitions"), "OffsetCommitRequestTopic.partitions"),
        (14, 5, ("assignments",), "SyncGroupRequest.assignments"),
        (9, 9, ("groups",), "OffsetFetchRequest.groups"),
        (9, 7, ("topics", "partition_indexes"), "OffsetFetchRequestTopic.partition_indexes"),
        (15, 5, ("groups",), "DescribeGroupsRequest.groups"),
        (68, 1, ("topic_partitions", "partitions"), "TopicPartitions.partitions"),
        (68, 0, ("topic_partitions", "partitions"), "TopicPartitions.partitions"),
    ],
)
def test_a_null_array_the_schema_does_not_allow_closes_with_one_warning(
    server: KafkaServer,
    witness: Witness,
    key: int,
    version: int,
    path: tuple[str, ...],
    field: str,
) -> None:
    """Was a ``TypeError: 'NoneType' object is not iterable`` traceback at ERROR: the decoder
    read the null and the conversion met it. Kafka closes the connection ("non-nullable field
    was serialized as null"); so do we, with one warning line naming the field."""
    closes_with_one_warning(
        server,
        witness,
        null_array_frame(key, version, path),
        f"{field} is not nullable but was sent as null",
    )


def test_a_find_coordinator_version_the_codec_does_not_know_closes_with_one_warning(
    server: KafkaServer, witness: Witness
) -> None:
    frame = struct.pack(">hhih", 10, 99, 5, -1) + b"\0\0"
    closes_with_one_warning(
        server, witness, struct.pack(">i", len(frame)) + frame, "find_coordinator v99"
    )
