"""The group -> coordinator partition function is Kafka's, bit for bit: Java's String.hashCode
(UTF-16 code units, 32-bit overflow) and Kafka's Utils.abs (Integer.MIN_VALUE -> 0)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.routing import CLUSTER_LOG, java_string_hash, partition_for


def reference_hash(text: str) -> int:
    """Java's ``String.hashCode`` spelled out: ``h = 31 * h + c`` over the UTF-16 code units,
    wrapped to a signed 32-bit int at every step."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        if h >= 2**31:
            h -= 2**32
    return h


@pytest.mark.parametrize(
    ("text", "java"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
        ("é", 233),
        ("\U0001f600", 1772899),  # outside the BMP: two surrogates, 0xD83D * 31 + 0xDE00
    ],
)
def test_java_string_hash_known_values(text: str, java: int) -> None:
    assert java_string_hash(text) == java == reference_hash(text)


def test_integer_min_value_goes_to_partition_zero() -> None:
    # Math.abs(Integer.MIN_VALUE) is negative in Java; Kafka's Utils.abs answers 0.
    assert [partition_for("polygenelubricants", n) for n in (1, 7, 50, 1024)] == [0, 0, 0, 0]


def test_partitions_of_some_groups() -> None:
    # abs(hashCode) % n, worked by hand from the hashes above.
    assert partition_for("hello", 50) == 99162322 % 50 == 22
    assert partition_for("Aa", 50) == partition_for("BB", 50) == 2112 % 50 == 12
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    assert partition_for("anything", 1) == 0


@given(st.text(max_size=80), st.integers(1, 1024))
def test_matches_the_reference_for_any_group_id(text: str, partitions: int) -> None:
    h = reference_hash(text)
    expected = 0 if h == -(2**31) else abs(h) % partitions
    assert partition_for(text, partitions) == expected
    assert 0 <= expected < partitions


def test_the_cluster_log_is_not_a_partition() -> None:
    assert CLUSTER_LOG == -1
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        partition_for("g", 0)
