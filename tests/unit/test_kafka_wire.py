"""coordinator/server/kafka/wire.py: finding a top-level tagged field without decoding the body
(what decides whether a forwarded Produce/Fetch response must be rewritten), checked against
kio's own decoding of the same bytes."""

from __future__ import annotations

import uuid

import pytest

from coordinator.server.kafka import wire

ENDPOINT = {"node_id": 2, "host": "broker-2", "port": 9092, "rack": None}


def produce_body(version: int, endpoints: list[dict[str, object]]) -> bytes:
    entity = wire.build(
        wire.response_class(0, version),
        responses=[
            {
                "name": f"topic-{t}",
                "partition_responses": [
                    {
                        "index": p,
                        "error_code": 6 if endpoints else 0,
                        "base_offset": 10 * p,
                        "log_append_time": None,
                        "log_start_offset": 0,
                        "record_errors": [{"batch_index": 1, "batch_index_error_message": "x"}],
                        "error_message": "boom" if p == 1 else None,
                        "current_leader": {"leader_id": 2, "leader_epoch": 3},
                    }
                    for p in range(3)
                ],
            }
            for t in range(2)
        ],
        throttle_time=0,
        node_endpoints=endpoints,
    )
    return wire.encode_body(entity)


def fetch_body(version: int, endpoints: list[dict[str, object]], records: bytes) -> bytes:
    entity = wire.build(
        wire.response_class(1, version),
        error_code=0,
        session_id=7,
        responses=[
            {
                "topic_id": uuid.uuid4(),
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": 100,
                        "last_stable_offset": 100,
                        "log_start_offset": 0,
                        "aborted_transactions": [{"producer_id": 1, "first_offset": 2}]
                        if p == 0
                        else None,
                        "preferred_read_replica": -1,
                        "records": records if p == 0 else None,
                        "diverging_epoch": {"epoch": 1, "end_offset": 5},
                        "current_leader": {"leader_id": 1, "leader_epoch": 1},
                    }
                    for p in range(4)
                ],
            }
        ],
        throttle_time=0,
        node_endpoints=endpoints,
    )
    return wire.encode_body(entity)


@pytest.mark.parametrize("version", [10, 11])
@pytest.mark.parametrize("endpoints", [[], [ENDPOINT]])
def test_produce_node_endpoints_found_without_decoding(
    version: int, endpoints: list[dict[str, object]]
) -> None:
    cls = wire.response_class(0, version)
    body = b"junk" + produce_body(version, endpoints)
    decoded, _ = wire._reader(cls)(body, 4)
    assert len(decoded.node_endpoints) == len(endpoints)
    assert wire.has_tagged_field(cls, body, 4, 0) is bool(endpoints)
    assert wire.has_tagged_field(cls, body, 4, 5) is False


@pytest.mark.parametrize("version", [16, 17])
@pytest.mark.parametrize("endpoints", [[], [ENDPOINT]])
def test_fetch_node_endpoints_found_past_megabytes_of_records(
    version: int, endpoints: list[dict[str, object]]
) -> None:
    cls = wire.response_class(1, version)
    body = fetch_body(version, endpoints, b"r" * 3_000_000)
    decoded, _ = wire._reader(cls)(body, 0)
    assert len(decoded.node_endpoints) == len(endpoints)
    assert wire.has_tagged_field(cls, body, 0, 0) is bool(endpoints)


def test_a_truncated_body_is_left_to_the_decoder() -> None:
    cls = wire.response_class(0, 11)
    body = produce_body(11, [])
    assert wire.has_tagged_field(cls, body[: len(body) // 2], 0, 0) is True
