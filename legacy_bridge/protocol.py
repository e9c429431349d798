"""Kafka's embedded consumer protocol: ConsumerProtocolSubscription and ConsumerProtocolAssignment.

These are the opaque ``metadata`` (JoinGroup) and ``assignment`` (SyncGroup) bytes of a classic
group whose protocol type is ``consumer``. Classic (non-flexible) encoding, big endian:
int16-length strings, int32-count arrays, int32-length bytes, -1 = null. Every message starts
with its int16 version. Versions:

* Subscription v0: topics, user_data; v1 + owned_partitions (KIP-429); v2 + generation_id
  (KIP-792); v3 + rack_id (KIP-881).
* Assignment v0..v3: assigned_partitions, user_data (the layout never changed).

A version above 3 is read as v3 (newer versions only append fields; trailing bytes are
ignored, as Kafka's ``ConsumerProtocol`` does). Malformed bytes raise :class:`ProtocolError`
with a message; the bridge turns it into INCONSISTENT_GROUP_PROTOCOL or INVALID_REQUEST.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import overload

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "LATEST_VERSION",
    "AssignmentMessage",
    "ProtocolError",
    "Subscription",
    "TopicPartitionList",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
LATEST_VERSION = 3

TopicPartitionList = tuple[tuple[str, tuple[int, ...]], ...]
"""((topic name, (partition, ...)), ...), in the order written on the wire."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ProtocolError(ValueError):
    """Bytes that are not a valid embedded consumer protocol message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    version: int = LATEST_VERSION
    topics: tuple[str, ...] = ()
    user_data: bytes | None = None
    owned_partitions: TopicPartitionList = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentMessage:
    version: int = LATEST_VERSION
    assigned_partitions: TopicPartitionList = ()
    user_data: bytes | None = None


# ---------------------------------------------------------------------------- writing


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def string(self, s: str | None) -> None:
        if s is None:
            self.i16(-1)
            return
        raw = s.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ProtocolError(f"string of {len(raw)} bytes is too long")
        self.i16(len(raw))
        self.parts.append(raw)

    def bytes_(self, b: bytes | None) -> None:
        if b is None:
            self.i32(-1)
            return
        self.i32(len(b))
        self.parts.append(bytes(b))

    def partitions(self, tps: TopicPartitionList) -> None:
        self.i32(len(tps))
        for topic, partitions in tps:
            self.string(topic)
            self.i32(len(partitions))
            for p in partitions:
                self.i32(p)

    def value(self) -> bytes:
        return b"".join(self.parts)


def _check_version(version: int) -> None:
    if not 0 <= version <= 0x7FFF:
        raise ProtocolError(f"unsupported consumer protocol version {version}")


def encode_subscription(s: Subscription) -> bytes:
    """Bytes exactly as Kafka's Java client and kafka-python write them for ``s.version``."""
    _check_version(s.version)
    w = _Writer()
    w.i16(s.version)
    w.i32(len(s.topics))
    for t in s.topics:
        w.string(t)
    w.bytes_(s.user_data)
    if s.version >= 1:
        w.partitions(s.owned_partitions)
    if s.version >= 2:
        w.i32(s.generation_id)
    if s.version >= 3:
        w.string(s.rack_id)
    return w.value()


def encode_assignment(a: AssignmentMessage) -> bytes:
    _check_version(a.version)
    w = _Writer()
    w.i16(a.version)
    w.partitions(a.assigned_partitions)
    w.bytes_(a.user_data)
    return w.value()


# ---------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = memoryview(bytes(buf))
        self.pos = 0
        self.what = what

    def _take(self, n: int, field: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ProtocolError(
                f"{self.what}: truncated at byte {self.pos} reading {field} "
                f"(needs {n} bytes, {len(self.buf) - self.pos} left)"
            )
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def i16(self, field: str) -> int:
        return _I16.unpack(self._take(2, field))[0]

    def i32(self, field: str) -> int:
        return _I32.unpack(self._take(4, field))[0]

    def count(self, field: str, min_item_bytes: int) -> int:
        n = self.i32(field)
        if n < 0:
            raise ProtocolError(f"{self.what}: {field} has a negative length {n}")
        if n * min_item_bytes > len(self.buf) - self.pos:
            raise ProtocolError(
                f"{self.what}: {field} claims {n} items but only {len(self.buf) - self.pos} bytes remain"
            )
        return n

    @overload
    def string(self, field: str) -> str: ...

    @overload
    def string(self, field: str, *, nullable: bool) -> str | None: ...

    def string(self, field: str, *, nullable: bool = False) -> str | None:
        """A STRING (NULLABLE_STRING with ``nullable``: length -1 is None)."""
        n = self.i16(field)
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ProtocolError(f"{self.what}: {field} has an invalid length {n}")
        raw = self._take(n, field)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{self.what}: {field} is not valid UTF-8") from None

    def bytes_(self, field: str) -> bytes | None:
        n = self.i32(field)
        if n == -1:
            return None
        if n < 0:
            raise ProtocolError(f"{self.what}: {field} has an invalid length {n}")
        return bytes(self._take(n, field))

    def partitions(self, field: str) -> TopicPartitionList:
        out = []
        for _ in range(self.count(field, 6)):
            topic = self.string(f"{field} topic")
            ps = tuple(
                self.i32(f"{field} partition") for _ in range(self.count(f"{field} partitions", 4))
            )
            out.append((topic, ps))
        return tuple(out)

    def version(self) -> int:
        v = self.i16("version")
        if v < 0:
            raise ProtocolError(f"{self.what}: unsupported version {v}")
        return v


def decode_subscription(data: bytes) -> Subscription:
    """Parse ConsumerProtocolSubscription bytes (any version; > 3 read as 3)."""
    r = _Reader(data, "ConsumerProtocolSubscription")
    version = r.version()
    topics = tuple(r.string("topics") for _ in range(r.count("topics", 2)))
    user_data = r.bytes_("user_data")
    owned: TopicPartitionList = ()
    generation_id = -1
    rack_id = None
    if version >= 1:
        owned = r.partitions("owned_partitions")
    if version >= 2:
        generation_id = r.i32("generation_id")
    if version >= 3:
        rack_id = r.string("rack_id", nullable=True)
    return Subscription(
        version=version,
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id,
    )


def decode_assignment(data: bytes) -> AssignmentMessage:
    """Parse ConsumerProtocolAssignment bytes (any version)."""
    r = _Reader(data, "ConsumerProtocolAssignment")
    version = r.version()
    assigned = r.partitions("assigned_partitions")
    user_data = r.bytes_("user_data")
    return AssignmentMessage(version=version, assigned_partitions=assigned, user_data=user_data)
