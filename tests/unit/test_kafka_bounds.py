"""coordinator/server/kafka/bounds.py: every length a body announces is checked against the
bytes left before kio's native decoder sees it. Anything that could make the native decoder
abort runs in a child process (a crash is then an exit status, not a lost test run)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from chaos import kafka_samples

from coordinator.server.kafka import bounds, wire

TESTS = Path(__file__).resolve().parents[1]
LIST_GROUPS_22 = (
    struct.pack(">i", 18) + struct.pack(">hhih", 16, 5, 1, -1) + b"\0" + b"\xff\xff\xff\xff\x7f\0\0"
)
"""ListGroups v5 (header v2, no client id) whose ``states_filter`` announces 34 billion
entries: the 22 bytes that made kio 0.6.5 allocate 256 GiB and abort the process."""


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=TESTS,
        env=dict(os.environ, PYTHONPATH=str(TESTS)),
        check=False,
    )


def body(key: int, version: int, frame: bytes) -> tuple[bytes, int]:
    """A whole request frame -> (frame without its size, where the body starts)."""
    frame = frame[4:]
    k, v, _c, _client, pos = wire.parse_header(frame)
    assert (k, v) == (key, version)
    return frame, wire.body_offset(frame, key, version, pos)


def test_the_22_byte_list_groups_request_aborts_the_native_decoder_alone() -> None:
    """The regression's premise, in a child: kio's reader without our check dies on it."""
    done = run_child(
        "from coordinator.server.kafka import wire\n"
        f"frame = {LIST_GROUPS_22[4:]!r}\n"
        "wire._reader(wire.request_class(16, 5))(frame, 11)\n"
    )
    assert done.returncode == -6, (done.returncode, done.stderr[-500:])  # SIGABRT
    assert "memory allocation of 274877906928 bytes failed" in done.stderr


def test_the_22_byte_list_groups_request_is_refused_before_decoding() -> None:
    done = run_child(
        "from coordinator.server.kafka import wire\n"
        f"frame = {LIST_GROUPS_22[4:]!r}\n"
        "try:\n"
        "    wire.decode(16, 5, frame, 11)\n"
        "except wire.WireError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == (
        "list_groups v5: ListGroupsRequest.states_filter: 34359738366 elements need at least "
        "34359738366 bytes, 2 left\n"
    )


@pytest.mark.slow
def test_mutations_of_every_message_the_codec_knows_never_crash_the_decoder() -> None:
    """Every request and response class kio knows (604), its fullest body mutated at every
    offset with huge, negative and null lengths and truncations: each decodes or is refused
    with WireError, and the child process lives (about 420,000 bodies)."""
    done = run_child(
        "import sys; from chaos import decode_child; sys.exit(decode_child.main())", 300
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    import json

    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["failures"] == []
    assert summary["outcomes"]["refused"] > 100_000 and summary["outcomes"]["decoded"] > 100_000


def test_every_message_the_codec_knows_passes_unchanged_and_decodes_as_kio_does() -> None:
    """No false refusal: the fullest body of each of the 604 classes is accepted as it is (the
    same bytes object comes back) and decodes to the entity it was made from."""
    wrong = []
    for kind, key, version, cls in kafka_samples.all_messages():
        entity = kafka_samples.sample(cls)
        data = wire.encode_body(entity)
        if bounds.check(cls, data, 0) is not data:
            wrong.append((kind, key, version, "copied"))
        decode = wire.decode if kind == "request" else wire.decode_response
        if decode(key, version, data, 0) != entity:
            wrong.append((kind, key, version, "decoded differently"))
    assert wrong == []


@pytest.mark.parametrize(
    ("key", "version", "field"),
    [
        (16, 5, "states_filter"),
        (16, 5, "types_filter"),
        (16, 4, "states_filter"),
        (8, 9, "topics"),
        (8, 2, "topics"),
        (14, 5, "assignments"),
        (14, 0, "assignments"),
        (9, 9, "groups"),
        (9, 1, "topics"),
        (9, 7, "topics"),
        (15, 6, "groups"),
        (15, 0, "groups"),
        (11, 9, "protocols"),
        (13, 5, "members"),
        (42, 2, "groups_names"),
        (47, 0, "topics"),
        (68, 1, "topic_partitions"),
        (69, 1, "group_ids"),
    ],
)
def test_a_null_where_the_schema_allows_none_is_refused(key: int, version: int, field: str) -> None:
    """kio reads a null array whatever the schema says; Kafka refuses one the schema does not
    allow ("non-nullable field was serialized as null"), and so do we, before the service sees
    a None. The arrays the schema lets be null decode as None (ConsumerGroupHeartbeat's
    ``topic_partitions``: unchanged; OffsetFetch v2+ ``topics``: all of them)."""
    cls = wire.request_class(key, version)
    data = with_null(cls, field)
    if (key, field) in NULLABLE and version >= NULLABLE[key, field]:
        assert getattr(wire.decode(key, version, data, 0), field) is None
        return
    with pytest.raises(
        wire.WireError, match=f"{cls.__name__}.{field} is not nullable but was sent as null"
    ):
        wire.decode(key, version, data, 0)


NULLABLE = {(68, "topic_partitions"): 0, (9, "topics"): 2}


def with_null(cls: type, field: str) -> bytes:
    """The fullest body of ``cls`` with the array ``field`` written as null (compact length 0,
    or int32 -1): found as the first byte where the body with that array empty and the body
    with one element differ (its length)."""
    sample = kafka_samples.sample(cls)
    values = {name: getattr(sample, name) for name in sample.__dataclass_fields__}
    empty = wire.encode_body(wire.build(cls, {**values, field: []}))
    one = wire.encode_body(wire.build(cls, {**values, field: [values[field][0]]}))
    at = next(i for i, (a, b) in enumerate(zip(empty, one, strict=False)) if a != b)
    if cls.__flexible__:  # type: ignore[attr-defined]
        assert empty[at] == 1
        return empty[:at] + b"\0" + empty[at + 1 :]
    at -= 3
    assert empty[at : at + 4] == bytes(4)
    return empty[:at] + b"\xff\xff\xff\xff" + empty[at + 4 :]


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them() -> None:
    """A tag the schema does not know (a newer client's field) is cut out, at the top level and
    in a nested entity, before kio (which would refuse it) reads the body; known tagged fields
    around it are kept."""
    plain = wire.build(wire.request_class(16, 5), states_filter=["Stable"], types_filter=[])
    data = wire.encode_body(plain)
    assert data[-1] == 0  # no tagged fields
    tagged = data[:-1] + b"\x02" + b"\x05\x02ab" + b"\x09\x00"
    assert wire.decode(16, 5, tagged, 0) == plain
    # nested: an element of ConsumerGroupHeartbeat v1's topic_partitions
    topic = uuid.UUID(int=7)
    hb = wire.build(
        wire.request_class(68, 1),
        group_id="g",
        member_id="m",
        member_epoch=3,
        topic_partitions=[{"topic_id": topic, "partitions": [0, 1]}],
    )
    data = wire.encode_body(hb)
    element = topic.bytes + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00"
    assert data.count(element) == 1
    nested = data.replace(element, element[:-1] + b"\x01\x04\x01z")
    assert wire.decode(68, 1, nested, 0) == hb
    # known tags kept, an unknown one after them cut (an ApiVersions response)
    resp = wire.build(
        wire.response_class(18, 3),
        error_code=0,
        api_keys=[{"api_key": 18, "min_version": 0, "max_version": 4}],
        throttle_time=0,
        finalized_features_epoch=5,
        zk_migration_ready=True,
    )
    data = wire.encode_body(resp)
    tail = b"\x02" + b"\x01\x08" + struct.pack(">q", 5) + b"\x03\x01\x01"
    assert data.endswith(tail)
    mixed = data[: -len(tail)] + b"\x03" + tail[1:] + b"\x07\x02zz"
    assert wire.decode_response(18, 3, mixed, 0) == resp


def test_a_compact_string_is_at_most_32767_bytes() -> None:
    """As Kafka's generated readers; bytes fields have no such bound."""
    for size, fits in ((32767, True), (32768, False)):
        hb = wire.build(wire.request_class(68, 1), group_id="g" * size, member_id="m")
        if fits:
            assert wire.decode(68, 1, wire.encode_body(hb), 0) == hb
        else:
            with pytest.raises(wire.WireError, match="a string of 32768 bytes"):
                wire.decode(68, 1, wire.encode_body(hb), 0)
    sasl = wire.build(wire.request_class(36, 2), auth_bytes=b"a" * 40000)
    assert wire.decode(36, 2, wire.encode_body(sasl), 0) == sasl


def test_strings_that_are_not_utf8_are_read_as_kafka_reads_them() -> None:
    """Java's String(bytes, UTF_8), which Kafka's readers use: each bad sequence becomes U+FFFD
    (kio refuses such a string) — legacy and compact strings, nullable ones, in nested arrays,
    beside an unknown tagged field; bytes fields are left as they are."""
    join = wire.build(
        wire.request_class(11, 5),
        group_id="g1",
        session_timeout=10000,
        rebalance_timeout=10000,
        member_id="",
        group_instance_id="i1",
        protocol_type="consumer",
        protocols=[{"name": "rr", "metadata": b"\xfc\xfc"}],
    )
    data = wire.encode_body(join).replace(b"rr", b"r\xff").replace(b"i1", b"\xc3i")
    assert wire.decode(11, 5, data, 0) == wire.build(
        wire.request_class(11, 5),
        {**wire.as_values(join), "group_instance_id": "\ufffdi"},
        protocols=[{"name": "r\ufffd", "metadata": b"\xfc\xfc"}],
    )
    listed = wire.build(
        wire.request_class(16, 5), states_filter=["ok", "St\u00e9"], types_filter=[]
    )
    data = wire.encode_body(listed).replace("St\u00e9".encode(), b"St\xe9\xe9")
    unknown_tag = data[:-1] + b"\x01\x05\x02ab"
    assert wire.decode(16, 5, unknown_tag, 0).states_filter == ("ok", "St\ufffd\ufffd")
    # Bodies that are UTF-8 come back as they are, and the walk's own refusals still hold.
    assert bounds.check(wire.request_class(16, 5), wire.encode_body(listed), 0, sanitize=True) == (
        wire.encode_body(listed)
    )
    with pytest.raises(wire.WireError, match="not nullable"):
        wire.decode(68, 1, b"\x00" + data, 0)


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"\x01\x05\x09ab", "tagged field 5 of 9 bytes, 2 left"),
        (b"\x05\x05\x00", "5 tagged fields in 2 bytes"),
        (b"\x01\xff\xff\xff\xff\xff", "varint longer than 5 bytes"),
    ],
)
def test_tagged_fields_must_fit(tail: bytes, why: str) -> None:
    data = wire.encode_body(
        wire.build(wire.request_class(16, 5), states_filter=[], types_filter=[])
    )
    with pytest.raises(wire.WireError, match=why):
        wire.decode(16, 5, data[:-1] + tail, 0)


def test_a_known_tagged_field_must_fill_its_size() -> None:
    resp = wire.build(wire.response_class(18, 3), error_code=0, api_keys=[], throttle_time=0)
    data = wire.encode_body(resp)
    bad = data[:-1] + b"\x01\x01\x09" + struct.pack(">q", 5) + b"\x00"  # int64 in 9 bytes
    with pytest.raises(wire.WireError, match="tagged field 1 does not fill its 9 bytes"):
        wire.decode_response(18, 3, bad, 0)


@pytest.mark.parametrize(
    ("key", "version", "patch", "why"),
    [
        (15, 0, b"\x7f\xff\xff\xff", "DescribeGroupsRequest.groups: 2147483647 elements"),
        (15, 0, b"\x80\x00\x00\x00", "DescribeGroupsRequest.groups: negative length"),
        (16, 5, b"\xff\xff\xff\xff\xff\x01", "varint longer than 5 bytes"),
        (16, 5, b"\x02\x7f", "ListGroupsRequest.states_filter\\[\\]: 126 bytes, 2 left"),
    ],
)
def test_lengths_beyond_the_frame_are_refused(
    key: int, version: int, patch: bytes, why: str
) -> None:
    with pytest.raises(wire.WireError, match=why):
        wire.decode(key, version, patch + b"\0\0", 0)


def test_a_negative_length_of_a_nullable_field_is_null_as_kafka_reads_it() -> None:
    """Kafka's generated readers take any negative length of a nullable string, bytes or array
    as null (``length < 0``), not only -1; of a field that is not nullable, they refuse it."""
    cls = wire.request_class(11, 5)
    join = wire.build(
        cls,
        group_id="g",
        session_timeout=10000,
        rebalance_timeout=10000,
        member_id="m",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b"x"}],
    )
    data = wire.encode_body(join)
    at = data.index(b"\xff\xff\x00\x08consumer")  # group_instance_id: null, -1
    for length in (b"\xff\xfe", b"\x80\x00"):
        patched = data[:at] + length + data[at + 2 :]
        assert wire.decode(11, 5, patched, 0) == join
    fetch = wire.build(wire.request_class(9, 2), group_id="g", topics=None)
    data = wire.encode_body(fetch)
    assert data[-4:] == b"\xff\xff\xff\xff"
    assert wire.decode(9, 2, data[:-4] + struct.pack(">i", -7), 0) == fetch
    with pytest.raises(wire.WireError, match="DescribeGroupsRequest.groups: negative length -2"):
        wire.decode(15, 0, struct.pack(">i", -2), 0)
    header = struct.pack(">hhih", 18, 0, 7, -2)
    assert wire.parse_header(header) == (18, 0, 7, None, 10)


def test_the_elements_of_a_request_are_counted_before_it_is_decoded() -> None:
    """With ``max_elements``, the strings and structures of every array, at every depth, count
    (arrays of fixed-size items do not: a member's owned partitions); one more than the bound
    is refused before kio decodes anything."""
    describe = wire.encode_body(wire.build(wire.request_class(15, 5), groups=["a", "b", "c"]))
    assert wire.decode(15, 5, describe, 0, max_elements=3).groups == ("a", "b", "c")
    with pytest.raises(
        wire.WireError,
        match="describe_groups v5: DescribeGroupsRequest.groups: more array elements than one "
        "request may hold",
    ):
        wire.decode(15, 5, describe, 0, max_elements=2)
    partitions = [{"partition_index": i, "committed_offset": i} for i in range(3)]
    commit = wire.build(
        wire.request_class(8, 9),
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[{"name": "t", "partitions": partitions}, {"name": "u", "partitions": []}],
    )
    data = wire.encode_body(commit)
    assert wire.decode(8, 9, data, 0, max_elements=5) == commit  # 2 topics + 3 partitions
    with pytest.raises(
        wire.WireError, match="OffsetCommitRequestTopic.partitions: more array elements"
    ):
        wire.decode(8, 9, data, 0, max_elements=4)
    owned = wire.build(
        wire.request_class(68, 1),
        group_id="g",
        member_id="m",
        member_epoch=1,
        topic_partitions=[{"topic_id": uuid.uuid4(), "partitions": list(range(1000))}],
    )
    data = wire.encode_body(owned)
    assert wire.decode(68, 1, data, 0, max_elements=1) == owned
    with pytest.raises(wire.WireError, match="more array elements"):
        wire.decode(68, 1, data, 0, max_elements=0)
    huge = struct.pack(">i", 2_000_000) + b"\0\0" * 2_000_000  # 2 million empty group ids
    with pytest.raises(wire.WireError, match="more array elements"):
        wire.decode(15, 0, huge, 0, max_elements=20_000)
    assert len(wire.decode(15, 0, huge, 0).groups) == 2_000_000  # no bound: all of them


def test_a_version_the_codec_does_not_know_is_a_wire_error() -> None:
    with pytest.raises(wire.WireError, match="find_coordinator v99 is not known to the codec"):
        wire.request_class(10, 99)
    with pytest.raises(wire.WireError, match="api_999 v0 is not known"):
        wire.request_flexible(999, 0)
