"""Embedded consumer protocol codec: byte compatibility with kafka-python, round trips, fuzz."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from legacy_bridge.protocol import (
    AssignmentMessage,
    ProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
tps = st.lists(
    st.tuples(names, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5).map(tuple)), max_size=4
).map(tuple)
user_data = st.none() | st.binary(max_size=16)


@st.composite
def subscriptions(draw: st.DrawFn) -> Subscription:
    version = draw(st.integers(0, 3))
    return Subscription(
        version=version,
        topics=tuple(draw(st.lists(names, max_size=5))),
        user_data=draw(user_data),
        owned_partitions=draw(tps) if version >= 1 else (),
        generation_id=draw(st.integers(-(2**31), 2**31 - 1)) if version >= 2 else -1,
        rack_id=draw(st.none() | names) if version >= 3 else None,
    )


@st.composite
def assignments(draw: st.DrawFn) -> AssignmentMessage:
    return AssignmentMessage(
        version=draw(st.integers(0, 3)), assigned_partitions=draw(tps), user_data=draw(user_data)
    )


def _k_subscription(s: Subscription) -> bytes:
    tp = KSubscription.TopicPartition
    k = KSubscription(
        version=s.version,
        topics=list(s.topics),
        user_data=s.user_data,
        owned_partitions=[tp(topic=t, partitions=list(ps)) for t, ps in s.owned_partitions],
        generation_id=s.generation_id,
        rack_id=s.rack_id,
    )
    return k.encode(version=s.version)


def _k_assignment(a: AssignmentMessage) -> bytes:
    tp = KAssignment.TopicPartition
    k = KAssignment(
        version=a.version,
        assigned_partitions=[tp(topic=t, partitions=list(ps)) for t, ps in a.assigned_partitions],
        user_data=a.user_data,
    )
    return k.encode(version=a.version)


SETTINGS = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(subscriptions())
def test_subscription_bytes_equal_kafka_python_and_round_trip(s: Subscription) -> None:
    ours = encode_subscription(s)
    assert ours == _k_subscription(s)
    assert decode_subscription(ours) == s


@SETTINGS
@given(assignments())
def test_assignment_bytes_equal_kafka_python_and_round_trip(a: AssignmentMessage) -> None:
    ours = encode_assignment(a)
    assert ours == _k_assignment(a)
    assert decode_assignment(ours) == a


def test_known_v3_subscription_bytes() -> None:
    s = Subscription(
        version=3,
        topics=("a", "b"),
        owned_partitions=(("a", (0, 1)),),
        generation_id=5,
        rack_id="r1",
    )
    assert encode_subscription(s) == (
        b"\x00\x03"
        b"\x00\x00\x00\x02"
        b"\x00\x01a"
        b"\x00\x01b"
        b"\xff\xff\xff\xff"
        b"\x00\x00\x00\x01"
        b"\x00\x01a"
        b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x00"
        b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x05"
        b"\x00\x02r1"
    )


def test_v0_subscription_from_kafka_python_decodes_with_defaults() -> None:
    raw = KSubscription(version=0, topics=["t"], user_data=b"u").encode(version=0)
    assert decode_subscription(raw) == Subscription(version=0, topics=("t",), user_data=b"u")


def test_newer_version_reads_as_v3_and_trailing_bytes_are_ignored() -> None:
    s = Subscription(version=3, topics=("t",), rack_id="r")
    raw = b"\x00\x07" + encode_subscription(s)[2:] + b"future fields"
    assert decode_subscription(raw) == Subscription(version=7, topics=("t",), rack_id="r")
    a = (
        encode_assignment(AssignmentMessage(version=1, assigned_partitions=(("t", (0,)),)))
        + b"\x01\x02"
    )
    assert decode_assignment(a) == AssignmentMessage(version=1, assigned_partitions=(("t", (0,)),))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b"",
            "ConsumerProtocolSubscription: truncated at byte 0 reading version (needs 2 bytes, 0 left)",
        ),
        (b"\xff\xff", "ConsumerProtocolSubscription: unsupported version -1"),
        (
            b"\x00\x00\xff\xff\xff\xff",
            "ConsumerProtocolSubscription: topics has a negative length -1",
        ),
        (
            b"\x00\x00\x00\x00\x10\x00",
            "ConsumerProtocolSubscription: topics claims 4096 items but only 0 bytes remain",
        ),
        (
            b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe\xff\xff\xff\xff",
            "ConsumerProtocolSubscription: topics is not valid UTF-8",
        ),
        (
            b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",
            "ConsumerProtocolSubscription: truncated at byte 10 reading owned_partitions (needs 4 bytes, 0 left)",
        ),
    ],
)
def test_malformed_subscriptions_raise_with_a_message(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_subscription(raw)
    assert str(info.value) == message


@SETTINGS
@given(st.binary(max_size=64))
def test_fuzz_random_bytes_never_crash(raw: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(raw)
        except ProtocolError:
            pass


@SETTINGS
@given(subscriptions(), st.data())
def test_fuzz_truncated_or_corrupted_valid_messages(s: Subscription, data: st.DataObject) -> None:
    raw = bytearray(encode_subscription(s))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        decode_subscription(bytes(raw[:cut]))
    except ProtocolError:
        pass
    if raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
        try:
            decode_subscription(bytes(raw))
        except ProtocolError:
            pass
