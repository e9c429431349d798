"""Which coordinator partition a group belongs to: Kafka's own function, so a group lands on the
same partition number here as on a Kafka cluster with the same ``offsets.topic.num.partitions``.

Kafka (GroupCoordinatorService.partitionFor): ``Utils.abs(groupId.hashCode()) % numPartitions``,
with Java's ``String.hashCode`` (``h = 31 * h + c`` over the string's UTF-16 code units, in
32-bit two's-complement arithmetic) and Kafka's ``Utils.abs``, which maps ``Integer.MIN_VALUE``
to 0 (``Math.abs`` would leave it negative). Pure: no IO, no state; Python's salted ``hash()``
must never be used for this.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from operator import mul

__all__ = [
    "CLUSTER_LOG",
    "DEFAULT_PARTITIONS",
    "MAX_PARTITIONS",
    "java_string_hash",
    "partition_for",
]

DEFAULT_PARTITIONS = 50
"""Kafka's default ``offsets.topic.num.partitions``."""
MAX_PARTITIONS = 1024
"""The most coordinator partitions a store may have (each is a state machine and a lease)."""
CLUSTER_LOG = -1
"""The log of cluster-level records (topics, users, ACLs): not a partition; every node follows
it."""

_INT_MIN = -(2**31)
_MASK = 0xFFFFFFFF
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_POW31 = [1]
"""31**i modulo 2**32, grown on demand."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: a signed 32-bit int. Characters outside the Basic
    Multilingual Plane count as their two UTF-16 surrogates, as in Java.

    ``h = 31 * h + c`` over the code units is ``sum(c[i] * 31 ** (n - 1 - i))`` modulo 2**32,
    summed here in C (``map``/``sum``) rather than a Python loop per character."""
    codes: bytes | memoryview = (
        text.encode("ascii")
        if text.isascii()
        else memoryview(text.encode(_UTF16, "surrogatepass")).cast("H")
    )
    n = len(codes)
    powers = _POW31
    while len(powers) < n:
        powers.append(powers[-1] * 31 & _MASK)
    h = sum(map(mul, codes, powers[n - 1 :: -1] if n else ())) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=1 << 16)  # asked for every request: a hit is a tenth of the hash
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions``."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    h = java_string_hash(group_id)
    return 0 if h == _INT_MIN else abs(h) % partitions
