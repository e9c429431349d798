"""Hostile clients against a real ``kip848 serve --kafka-listen`` (coordinator-only mode): a
request whose lengths no frame could hold, nulls where the schema allows none, versions the
codec does not know. Each gets what Kafka gives — its connection closed, with one WARNING line
saying why — and never a crash, a traceback or a line above WARNING; the server keeps serving
everyone else, and a member of another group heartbeats throughout."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

import pytest
from chaos import kafka_samples
from kafka_support import KafkaServer, request
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
